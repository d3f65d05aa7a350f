/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Site configuration: plugstack.conf arguments and the site JSON; see site_config.h. */
#include "site_config.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "dtrain_file.h"
#include "dtrain_master_port.h"
#include "dtrain_parse.h"
#include "dtrain_explain.h"
#include "dtrain_plan.h"
#include "dtrain_topo.h"

#define SITE_JSON_MAX_BYTES (1 << 20) /* a site file larger than this is refused */

void dtrain_config_init(struct dtrain_site_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->allow_pcie = DTRAIN_PCIE_USER;
    cfg->master_port_lo = DTRAIN_MASTER_PORTS_DEFAULT_LO;
    cfg->master_port_hi = DTRAIN_MASTER_PORTS_DEFAULT_HI;
    cfg->net_gbps = DTRAIN_EXPLAIN_NET_GBPS_DEFAULT;
    cfg->pcie_gbps = DTRAIN_EXPLAIN_PCIE_GBPS_DEFAULT;
}

/* ---------------------------------------------------------------- one key */

static int set_path(char *dst, const char *key, const char *value, char *err, size_t errlen)
{
    if (value[0] != '/') {
        dtrain_snprintf(err, errlen, "%s=%.512s: give an absolute path", key, value);
        return -1;
    }
    if (dtrain_snprintf(dst, DTRAIN_CONFIG_PATH_MAX, "%s", value) != 0) {
        dtrain_snprintf(err, errlen, "%s: the path is longer than %d bytes", key, DTRAIN_CONFIG_PATH_MAX - 1);
        return -1;
    }
    return 0;
}

static int set_pcie(struct dtrain_site_config *cfg, const char *value, char *err, size_t errlen)
{
    int yes;
    char ignored[128];
    if (strcasecmp(value, "user") == 0) {
        cfg->allow_pcie = DTRAIN_PCIE_USER;
        return 0;
    }
    if (dtrain_parse_bool(value, "allow_pcie", &yes, ignored, sizeof ignored) != 0) {
        dtrain_snprintf(err, errlen, "allow_pcie=%.64s: use yes, no or user", value);
        return -1;
    }
    cfg->allow_pcie = yes ? DTRAIN_PCIE_ALWAYS : DTRAIN_PCIE_NEVER;
    return 0;
}

/* Apply key=value (key is not "config"). */
static int set_key(struct dtrain_site_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    long v;
    if (strcmp(key, "topology_xml") == 0)
        return set_path(cfg->topology_xml, key, value, err, errlen);
    if (strcmp(key, "bind") == 0)
        return dtrain_parse_bool(value, "bind", &cfg->bind, err, errlen);
    if (strcmp(key, "allow_pcie") == 0)
        return set_pcie(cfg, value, err, errlen);
    if (strcmp(key, "max_tp") == 0) {
        if (dtrain_parse_int(value, 0, DTRAIN_TOPO_MAX_GPUS, "max_tp", &v, err, errlen) != 0)
            return -1;
        cfg->max_tp = (int)v;
        return 0;
    }
    if (strcmp(key, "nvlink_domain_gpus") == 0) {
        if (dtrain_parse_int(value, 0, DTRAIN_PLAN_MAX_DIM, "nvlink_domain_gpus", &v, err, errlen) != 0)
            return -1;
        cfg->nvlink_domain_gpus = (int)v;
        return 0;
    }
    if (strcmp(key, "nvlink_domain_source") == 0) {
        if (strcmp(value, "nvml") != 0 && strcmp(value, "block") != 0) {
            dtrain_snprintf(err, errlen, "nvlink_domain_source=%.64s: use nvml or block", value);
            return -1;
        }
        cfg->nvlink_domain_block = strcmp(value, "block") == 0;
        return 0;
    }
    if (strcmp(key, "gpu_visibility") == 0) {
        if (strcmp(value, "all") != 0 && strcmp(value, "one") != 0) {
            dtrain_snprintf(err, errlen, "gpu_visibility=%.64s: use all or one", value);
            return -1;
        }
        cfg->gpu_visibility_one = strcmp(value, "one") == 0;
        return 0;
    }
    if (strcmp(key, "net_gbps") == 0 || strcmp(key, "pcie_gbps") == 0) {
        if (dtrain_parse_int(value, 1, DTRAIN_EXPLAIN_GBPS_MAX, key, &v, err, errlen) != 0)
            return -1;
        *(key[0] == 'n' ? &cfg->net_gbps : &cfg->pcie_gbps) = (int)v;
        return 0;
    }
    if (strcmp(key, "master_ports") == 0)
        return dtrain_master_ports_parse(value, "master_ports", &cfg->master_port_lo, &cfg->master_port_hi, err,
                                         errlen);
    dtrain_snprintf(err, errlen, "unknown key '%.64s' (known: config, topology_xml, bind, allow_pcie, max_tp, "
                    "nvlink_domain_gpus, nvlink_domain_source, gpu_visibility, master_ports, net_gbps, pcie_gbps)", key);
    return -1;
}

/* ---------------------------------------------------------------- site JSON */

/* A JSON value as the text a plugstack argument would carry. */
static int json_value_text(const char *key, json_t *value, char *buf, size_t len, char *err, size_t errlen)
{
    int rc;
    if (json_is_string(value))
        rc = dtrain_snprintf(buf, len, "%s", json_string_value(value));
    else if (json_is_boolean(value))
        rc = dtrain_snprintf(buf, len, "%s", json_is_true(value) ? "yes" : "no");
    else if (json_is_integer(value) && json_integer_value(value) >= 0)
        rc = dtrain_snprintf(buf, len, "%lld", (long long)json_integer_value(value));
    else {
        dtrain_snprintf(err, errlen, "\"%s\": use a string, a boolean or a whole number", key);
        return -1;
    }
    if (rc != 0)
        dtrain_snprintf(err, errlen, "\"%s\": the value is too long", key);
    return rc;
}

static int load_json(struct dtrain_site_config *cfg, const char *path, char *err, size_t errlen)
{
    char msg[512], text[DTRAIN_CONFIG_PATH_MAX];
    json_error_t jerr;
    json_t *root = NULL;
    const char *key;
    json_t *value;
    int rc = -1;

    /* Opened as a root process trusts it (common/dtrain_file.h): no link,
     * root-owned file and folders, checked on what is then read. */
    int fd = dtrain_open_trusted(path, "config", SITE_JSON_MAX_BYTES, err, errlen);
    if (fd < 0)
        return -1;
    root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (root == NULL) {
        dtrain_snprintf(err, errlen, "config %.512s: line %d: %.200s", path, jerr.line, jerr.text);
        goto cleanup;
    }
    if (!json_is_object(root)) {
        dtrain_snprintf(err, errlen, "config %.512s: the top level must be an object", path);
        goto cleanup;
    }
    /* Other dtrain tools may keep their own top-level sections: only
     * "spank" belongs to the plugin. */
    json_t *spank = json_object_get(root, "spank");
    if (spank == NULL) {
        rc = 0;
        goto cleanup;
    }
    if (!json_is_object(spank)) {
        dtrain_snprintf(err, errlen, "config %.512s: \"spank\" must be an object", path);
        goto cleanup;
    }
    json_object_foreach(spank, key, value) {
        if (strcmp(key, "config") == 0) {
            dtrain_snprintf(err, errlen, "config %.512s: \"config\" cannot be set inside the site file", path);
            goto cleanup;
        }
        if (json_value_text(key, value, text, sizeof text, msg, sizeof msg) != 0 ||
            set_key(cfg, key, text, msg, sizeof msg) != 0) {
            dtrain_snprintf(err, errlen, "config %.512s: \"spank\": %s", path, msg);
            goto cleanup;
        }
    }
    rc = 0;
cleanup:
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- arguments */

/* Split "key=value" into key (bounded copy) and value.  Returns -1 on no '='. */
static int split_arg(const char *arg, char *key, size_t keylen, const char **value)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= keylen)
        return -1;
    memcpy(key, arg, (size_t)(eq - arg));
    key[eq - arg] = '\0';
    *value = eq + 1;
    return 0;
}

int dtrain_config_parse(struct dtrain_site_config *cfg, int ac, char **av, char *err, size_t errlen)
{
    char key[64], msg[512];
    const char *value;

    dtrain_config_init(cfg);
    /* Pass 1: check the syntax of every argument and load the site file. */
    for (int i = 0; i < ac; i++) {
        if (split_arg(av[i], key, sizeof key, &value) != 0) {
            dtrain_snprintf(err, errlen, "plugstack.conf: '%.64s' is not key=value", av[i]);
            return -1;
        }
        if (strcmp(key, "config") != 0)
            continue;
        if (cfg->config[0] != '\0') {
            dtrain_snprintf(err, errlen, "plugstack.conf: config= is given twice");
            return -1;
        }
        if (set_path(cfg->config, "config", value, msg, sizeof msg) != 0 ||
            load_json(cfg, cfg->config, msg, sizeof msg) != 0) {
            dtrain_snprintf(err, errlen, "plugstack.conf: %s", msg);
            return -1;
        }
    }
    /* Pass 2: the line's own keys win over the site file. */
    for (int i = 0; i < ac; i++) {
        split_arg(av[i], key, sizeof key, &value);
        if (strcmp(key, "config") == 0)
            continue;
        if (set_key(cfg, key, value, msg, sizeof msg) != 0) {
            dtrain_snprintf(err, errlen, "plugstack.conf: %s", msg);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- queries */

static int node_name_ok(const char *node)
{
    size_t len = strnlen(node, DTRAIN_CONFIG_NODE_MAX);
    if (len == 0 || len >= DTRAIN_CONFIG_NODE_MAX || strstr(node, "..") != NULL)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = node[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int dtrain_config_topology_path(const struct dtrain_site_config *cfg, const char *node,
                                char *out, size_t outlen, char *err, size_t errlen)
{
    /* a name that cannot go into a path counts as no name: refused where
     * "%n" asks for it */
    const char *usable = node != NULL && node_name_ok(node) ? node : NULL;
    switch (dtrain_expand_node(cfg->topology_xml, usable, out, outlen)) {
    case 0:
        return 0;
    case -2:
        dtrain_snprintf(err, errlen, "topology_xml=%.512s: the node name '%.64s' cannot go into a path",
                        cfg->topology_xml, node ? node : "");
        return -1;
    default:
        dtrain_snprintf(err, errlen, "topology_xml=%.512s: the expanded path is too long", cfg->topology_xml);
        return -1;
    }
}

int dtrain_config_pcie_allowed(const struct dtrain_site_config *cfg, int user_asked)
{
    switch (cfg->allow_pcie) {
    case DTRAIN_PCIE_ALWAYS:
        return 1;
    case DTRAIN_PCIE_NEVER:
        return user_asked ? -1 : 0;
    case DTRAIN_PCIE_USER:
        break;
    }
    return user_asked ? 1 : 0;
}
