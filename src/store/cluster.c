/*
 * cluster.c - questions about the cluster rather than about objects: the
 * names of the segments mounted at the master (GET_ALL_SEGMENTS), which
 * the Python layer uses to place the members of an object group together.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "store/internal.h"
#include "store/thin.h"

void cr_store_free_names(char **names, size_t n)
{
    if (names == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int cr_store_list_segments(cr_store *s, char ***names_out, size_t *n_out)
{
    if (cr_store_is_thin(s))
        return crc_thin_list_segments(s, names_out, n_out);
    int rc = crc_check_open(s);
    if (rc < 0)
        return rc;
    if (names_out == NULL || n_out == NULL)
        return crb_error(CR_INVALID_PARAMS, "list_segments: NULL output");
    crp_rpc_req req = {.op = CRP_RPC_GET_ALL_SEGMENTS};
    crp_rpc_resp resp;
    rc = crc_call(s, &req, &resp);
    if (rc < 0)
        return rc;
    if (resp.status < 0) {
        rc = crb_error(resp.status, "list_segments: %s",
                       resp.message ? resp.message : cr_strerror(resp.status));
        crp_rpc_resp_clear(&resp);
        return rc;
    }
    size_t n = resp.u.names.n_names;
    char **names = n ? calloc(n, sizeof(*names)) : NULL;
    if (n > 0 && names == NULL)
        rc = crb_error(CR_ERR_NO_MEMORY, "list_segments: %zu names", n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if ((names[i] = strdup(resp.u.names.names[i])) == NULL)
            rc = crb_error(CR_ERR_NO_MEMORY, "list_segments: name %zu", i);
    crp_rpc_resp_clear(&resp);
    if (rc < 0) {
        cr_store_free_names(names, n);
        return rc;
    }
    *names_out = names;
    *n_out = n;
    return 0;
}
