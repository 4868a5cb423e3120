/*
 * curl_util.c - see curl_util.h. The pool keeps at most CRM_CURL_POOL_MAX
 * idle handles; extra handles released while the pool is full are cleaned
 * up, so a burst of concurrent callers costs connections only while it lasts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "metadata/curl_util.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void)
{
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int crm_curl_global_init(const char *who)
{
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_result != CURLE_OK)
        return crb_error(CR_ERR_METADATA, "%s: curl_global_init failed: %s", who,
                         curl_easy_strerror(curl_init_result));
    return 0;
}

int crm_curl_pool_init(crm_curl_pool *p)
{
    memset(p, 0, sizeof(*p));
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return crb_error(CR_ERR_SYSTEM, "curl handle pool: pthread_mutex_init failed");
    return 0;
}

void crm_curl_pool_fini(crm_curl_pool *p)
{
    for (int i = 0; i < p->n_idle; i++)
        curl_easy_cleanup(p->idle[i]);
    p->n_idle = 0;
    pthread_mutex_destroy(&p->lock);
}

CURL *crm_curl_pool_acquire(crm_curl_pool *p)
{
    CURL *h = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->n_idle > 0)
        h = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->lock);
    return h != NULL ? h : curl_easy_init();
}

void crm_curl_pool_release(crm_curl_pool *p, CURL *h)
{
    if (h == NULL)
        return;
    curl_easy_reset(h);
    pthread_mutex_lock(&p->lock);
    if (p->n_idle < CRM_CURL_POOL_MAX) {
        p->idle[p->n_idle++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    if (h != NULL)
        curl_easy_cleanup(h);
}

bool crm_curl_body_append(crm_curl_body *b, const char *ptr, size_t n)
{
    size_t room = b->limit - b->len;
    size_t keep = room < n ? room : n;
    if (keep < n && b->fail_over_limit) {
        b->over = true;
        return false;
    }
    if (keep == 0)
        return true;
    if (b->len + keep > b->cap) {
        size_t cap = b->cap > 0 ? b->cap : 4096;
        while (cap < b->len + keep)
            cap = cap > SIZE_MAX / 2 ? b->len + keep : cap * 2;
        char *d = realloc(b->data, cap);
        if (d == NULL) {
            b->oom = true;
            return false;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, keep);
    b->len += keep;
    return true;
}

size_t crm_curl_on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    size_t n = size * nmemb;
    return crm_curl_body_append(userdata, ptr, n) ? n : 0; /* 0 fails the transfer */
}
