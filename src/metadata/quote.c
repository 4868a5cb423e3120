/* quote.c - see quote.h. */
#include "metadata/quote.h"

void crm_quote(const char *p, size_t n, char out[CRM_QUOTE_MAX + 1])
{
    if (p == NULL)
        n = 0;
    if (n > CRM_QUOTE_MAX)
        n = CRM_QUOTE_MAX;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : ' ';
    }
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = '\0';
}
