/*
 * conf_file.c - JSON and YAML master config files as flat key/scalar lists
 * (see conf_file.h).
 *
 * Design: JSON goes through jansson (duplicates rejected, values typed);
 * jansson reports no positions for members, so a small scanner walks the
 * text once to find the line of each top-level key (strings skipped with
 * their escapes, depth counted). YAML goes through libyaml's event parser,
 * which gives every scalar's position: the accepted shape is exactly one
 * document holding one block or flow mapping of scalar keys to scalar
 * values; everything else is refused with the line it is on. Every input
 * is bounded (CRK_CONF_MAX_BYTES, CRK_CONF_MAX_ENTRIES) and the file is read
 * whole before parsing, so a decoder never sees more than that.
 */
#include "master/conf_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <yaml.h>

#include "base/error.h"
#include "crescent/status.h"

void crk_conf_list_free(crk_conf_list *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].key);
        free(l->v[i].value);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

int crk_conf_format_of(const char *path, crk_conf_format *out)
{
    if (ends_with(path, ".json")) {
        *out = CRK_CONF_JSON;
        return 0;
    }
    if (ends_with(path, ".yaml") || ends_with(path, ".yml")) {
        *out = CRK_CONF_YAML;
        return 0;
    }
    return crb_error(CR_INVALID_PARAMS,
                     "%s: unsupported config file format (the name must end in .json, .yaml "
                     "or .yml)",
                     path);
}

/* Append (key, value) copies to l (capacity in *cap). */
static int push(crk_conf_list *l, size_t *cap, const char *name, const char *key, size_t key_len,
                const char *value, size_t value_len, crk_conf_kind kind, int line)
{
    if (l->n >= CRK_CONF_MAX_ENTRIES)
        return crb_error(CR_INVALID_PARAMS, "%s:%d: more than %u keys", name, line,
                         CRK_CONF_MAX_ENTRIES);
    if (memchr(key, '\0', key_len) != NULL || memchr(value, '\0', value_len) != NULL)
        return crb_error(CR_INVALID_PARAMS, "%s:%d: key or value contains a NUL byte", name, line);
    for (size_t i = 0; i < l->n; i++)
        if (strlen(l->v[i].key) == key_len && memcmp(l->v[i].key, key, key_len) == 0)
            return crb_error(CR_INVALID_PARAMS, "%s:%d: duplicate key '%.*s' (first on line %d)",
                             name, line, (int)key_len, key, l->v[i].line);
    if (l->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 32;
        crk_conf_entry *nv = realloc(l->v, ncap * sizeof(*nv));
        if (nv == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "%s: out of memory", name);
        l->v = nv;
        *cap = ncap;
    }
    crk_conf_entry *e = &l->v[l->n];
    e->key = strndup(key, key_len);
    e->value = strndup(value, value_len);
    if (e->key == NULL || e->value == NULL) {
        free(e->key);
        free(e->value);
        return crb_error(CR_ERR_NO_MEMORY, "%s: out of memory", name);
    }
    e->kind = kind;
    e->line = line;
    l->n++;
    return 0;
}

/* --- JSON ---------------------------------------------------------------------- */

/* Line of the top-level member `key` in the JSON text, 0 if not found. */
static int json_key_line(const char *data, size_t len, const char *key)
{
    size_t klen = strlen(key);
    int line = 1, depth = 0;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (c == '\n') {
            line++;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == '"') {
            size_t start = ++i;
            bool escaped = false;
            while (i < len && data[i] != '"') {
                if (data[i] == '\\') {
                    escaped = true;
                    i++;
                }
                if (i < len && data[i] == '\n')
                    line++;
                i++;
            }
            if (i >= len)
                return 0;
            size_t end = i, j = i + 1;
            while (j < len &&
                   (data[j] == ' ' || data[j] == '\t' || data[j] == '\r' || data[j] == '\n'))
                j++;
            if (depth == 1 && !escaped && j < len && data[j] == ':' && end - start == klen &&
                memcmp(data + start, key, klen) == 0)
                return line;
        }
    }
    return 0;
}

static int parse_json(const char *data, size_t len, const char *name, crk_conf_list *out)
{
    json_error_t err;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL) {
        if (err.line <= 0)
            return crb_error(CR_INVALID_PARAMS, "%s: %s", name, err.text);
        return crb_error(CR_INVALID_PARAMS, "%s:%d: column %d: %s", name, err.line, err.column,
                         err.text);
    }
    int rc = 0;
    crk_conf_list l = {0};
    size_t cap = 0;
    if (!json_is_object(root)) {
        rc = crb_error(CR_INVALID_PARAMS, "%s: the top level must be a JSON object", name);
        goto decref_root;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        char text[64];
        const char *value = text;
        size_t value_len;
        crk_conf_kind kind;
        int line = json_key_line(data, len, key);
        switch (json_typeof(val)) {
        case JSON_STRING:
            value = json_string_value(val);
            value_len = json_string_length(val);
            kind = CRK_CONF_STRING;
            break;
        case JSON_TRUE:
        case JSON_FALSE:
            snprintf(text, sizeof(text), "%s", json_is_true(val) ? "true" : "false");
            kind = CRK_CONF_BOOL;
            break;
        case JSON_INTEGER:
            snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(val));
            kind = CRK_CONF_INT;
            break;
        case JSON_REAL:
            snprintf(text, sizeof(text), "%.17g", json_real_value(val));
            kind = CRK_CONF_REAL;
            break;
        case JSON_NULL:
            text[0] = '\0';
            kind = CRK_CONF_NULL;
            break;
        default:
            rc = crb_error(CR_INVALID_PARAMS,
                           "%s:%d: key '%s' must be a string, number or boolean (nested objects "
                           "and arrays are not master settings)",
                           name, line, key);
            goto free_list;
        }
        if (kind != CRK_CONF_STRING)
            value_len = strlen(text);
        rc = push(&l, &cap, name, key, strlen(key), value, value_len, kind, line);
        if (rc != 0)
            goto free_list;
    }
    *out = l;
    goto decref_root;
free_list:
    crk_conf_list_free(&l);
decref_root:
    json_decref(root);
    return rc;
}

/* --- YAML ---------------------------------------------------------------------- */

static const char *event_name(yaml_event_type_t t)
{
    switch (t) {
    case YAML_SEQUENCE_START_EVENT:
        return "a sequence";
    case YAML_MAPPING_START_EVENT:
        return "a nested mapping";
    case YAML_ALIAS_EVENT:
        return "an alias";
    case YAML_SCALAR_EVENT:
        return "a scalar";
    case YAML_DOCUMENT_START_EVENT:
        return "another document";
    default:
        return "unexpected YAML";
    }
}

static int yaml_fail(const yaml_parser_t *p, const char *name)
{
    return crb_error(CR_INVALID_PARAMS, "%s:%zu: column %zu: %s%s%s", name,
                     p->problem_mark.line + 1, p->problem_mark.column + 1,
                     p->problem != NULL ? p->problem : "YAML syntax error",
                     p->context != NULL ? " " : "", p->context != NULL ? p->context : "");
}

/*
 * States: 0 before the mapping, 1 expecting a key or the mapping's end,
 * 2 expecting the value of `key`, 3 after the mapping (document end, stream
 * end), 4 done.
 */
static int parse_yaml(const char *data, size_t len, const char *name, crk_conf_list *out)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return crb_error(CR_ERR_NO_MEMORY, "%s: out of memory", name);
    yaml_parser_set_input_string(&p, (const unsigned char *)data, len);
    crk_conf_list l = {0};
    size_t cap = 0;
    int rc = 0, state = 0;
    char *key = NULL;
    size_t key_len = 0;
    int key_line = 0;
    while (rc == 0 && state != 4) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = yaml_fail(&p, name);
            break;
        }
        int line = (int)ev.start_mark.line + 1;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
        case YAML_NO_EVENT:
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (state == 3)
                rc = crb_error(CR_INVALID_PARAMS, "%s:%d: a second YAML document", name, line);
            break;
        case YAML_DOCUMENT_END_EVENT:
            state = 3;
            break;
        case YAML_STREAM_END_EVENT:
            state = 4;
            break;
        case YAML_MAPPING_START_EVENT:
            if (state == 0)
                state = 1;
            else
                rc =
                    crb_error(CR_INVALID_PARAMS, "%s:%d: key '%.*s' must be a scalar, not %s", name,
                              line, (int)key_len, key != NULL ? key : "", event_name(ev.type));
            break;
        case YAML_MAPPING_END_EVENT:
            state = 3;
            break;
        case YAML_SCALAR_EVENT: {
            const char *text = (const char *)ev.data.scalar.value;
            size_t text_len = ev.data.scalar.length;
            if (state == 1) {
                key = strndup(text, text_len);
                key_len = text_len;
                key_line = line;
                state = 2;
                if (key == NULL)
                    rc = crb_error(CR_ERR_NO_MEMORY, "%s: out of memory", name);
            } else if (state == 2) {
                bool quoted = ev.data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                              ev.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
                              ev.data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                              ev.data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
                rc = push(&l, &cap, name, key, key_len, text, text_len,
                          quoted ? CRK_CONF_STRING : CRK_CONF_PLAIN, key_line);
                free(key);
                key = NULL;
                state = 1;
            } else if (state == 0 && text_len == 0) {
                state = 3; /* an empty document: no settings */
            } else {
                rc = crb_error(CR_INVALID_PARAMS,
                               "%s:%d: the top level must be a mapping of "
                               "keys to values",
                               name, line);
            }
            break;
        }
        default:
            if (state == 2)
                rc = crb_error(CR_INVALID_PARAMS, "%s:%d: key '%s' must be a scalar, not %s", name,
                               line, key, event_name(ev.type));
            else
                rc = crb_error(CR_INVALID_PARAMS, "%s:%d: %s is not a master setting", name, line,
                               event_name(ev.type));
            break;
        }
        yaml_event_delete(&ev);
    }
    free(key);
    yaml_parser_delete(&p);
    if (rc != 0) {
        crk_conf_list_free(&l);
        return rc;
    }
    *out = l;
    return 0;
}

int crk_conf_parse(const char *data, size_t len, crk_conf_format format, const char *name,
                   crk_conf_list *out)
{
    if ((data == NULL && len > 0) || name == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "crk_conf_parse: NULL argument");
    if (len > CRK_CONF_MAX_BYTES)
        return crb_error(CR_INVALID_PARAMS, "%s: larger than %u bytes", name, CRK_CONF_MAX_BYTES);
    if (format == CRK_CONF_JSON)
        return parse_json(data != NULL ? data : "", len, name, out);
    return parse_yaml(data != NULL ? data : "", len, name, out);
}

int crk_conf_read_file(const char *path, crk_conf_list *out)
{
    crk_conf_format format;
    int rc = crk_conf_format_of(path, &format);
    if (rc != 0)
        return rc;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return crb_error(CR_INVALID_PARAMS, "%s: %s", path, strerror(errno));
    char *data = malloc(CRK_CONF_MAX_BYTES + 1);
    if (data == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "%s: out of memory", path);
        goto close_file;
    }
    size_t len = fread(data, 1, CRK_CONF_MAX_BYTES + 1, f);
    if (ferror(f))
        rc = crb_error(CR_INVALID_PARAMS, "%s: read error", path);
    else if (len > CRK_CONF_MAX_BYTES)
        rc = crb_error(CR_INVALID_PARAMS, "%s: larger than %u bytes", path, CRK_CONF_MAX_BYTES);
    else
        rc = crk_conf_parse(data, len, format, path, out);
    free(data);
close_file:
    fclose(f);
    return rc;
}
