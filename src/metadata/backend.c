/*
 * backend.c - choose a metadata backend from its connection string.
 *
 * The string is matched exactly, as Mooncake does: "P2PHANDSHAKE" (case
 * matters) selects the storage-less peer-to-peer backend and any string that
 * starts with "http://" is handed, whole, to the HTTP backend, which checks
 * the rest of the URL. Everything else, including schemes Mooncake knows but
 * this build does not ("https://", "etcd://", "redis://"), is refused with
 * CR_ERR_INVALID_CONFIG naming the string and the supported forms.
 */
#include <stddef.h>
#include <string.h>

#include "base/error.h"
#include "metadata/backend.h"

#define SUPPORTED_FORMS "P2PHANDSHAKE, http://host:port/path"

int crm_backend_open(const char *conn, int timeout_ms, crm_backend **out)
{
    if (out == NULL)
        return crb_error(CR_ERR_INVALID_ARGUMENT, "crm_backend_open: out is NULL");
    *out = NULL;
    if (conn == NULL)
        return crb_error(CR_ERR_INVALID_CONFIG,
                         "metadata connection string is missing; supported: " SUPPORTED_FORMS);

    crm_backend *b = NULL;
    int rc;
    if (strcmp(conn, "P2PHANDSHAKE") == 0) {
        rc = crm_p2p_backend_create(&b);
        if (rc == 0)
            b->timeout_ms = timeout_ms;
    } else if (strncmp(conn, "http://", 7) == 0) {
        rc = crm_http_backend_create(conn, timeout_ms, &b);
    } else {
        return crb_error(
            CR_ERR_INVALID_CONFIG,
            "metadata connection string '%.200s' is not supported; supported: " SUPPORTED_FORMS,
            conn);
    }
    if (rc < 0)
        return rc;
    *out = b;
    return 0;
}
