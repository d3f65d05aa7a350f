/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Site configuration: plugstack.conf arguments and the site JSON; see site_config.h. */
#include "site_config.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "dtrain_file.h"
#include "dtrain_master_port.h"
#include "dtrain_parse.h"
#include "dtrain_settings.h"
#include "dtrain_explain.h"
#include "dtrain_plan.h"
#include "dtrain_topo.h"
#include "imex.h"

#define SITE_JSON_MAX_BYTES (1 << 20) /* a site file larger than this is refused */

void dtrain_config_init(struct dtrain_site_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->allow_pcie = DTRAIN_PCIE_USER;
    cfg->master_port_lo = DTRAIN_MASTER_PORTS_DEFAULT_LO;
    cfg->master_port_hi = DTRAIN_MASTER_PORTS_DEFAULT_HI;
    cfg->ports_per_step = DTRAIN_PORTS_PER_STEP_DEFAULT;
    cfg->imex_check = 1;
    dtrain_snprintf(cfg->imex_channels, sizeof cfg->imex_channels, "%s", DTRAIN_IMEX_CHANNELS_DIR);
    cfg->net_gbps = DTRAIN_EXPLAIN_NET_GBPS_DEFAULT;
    cfg->pcie_gbps = DTRAIN_EXPLAIN_PCIE_GBPS_DEFAULT;
    cfg->expedited_requeue = 1;
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

/* The plugin's refinements of the common types (struct dtrain_setting.kind). */
enum site_kind {
    S_PLAIN,  /* the common type as it is */
    S_CONFIG, /* config=: read apart, before every other key */
    S_PATH,   /* TEXT: an absolute path */
    S_PCIE,   /* CUSTOM: yes, no or user */
    S_PORTS,  /* CUSTOM: master_ports=LO-HI */
};

#define SITE_OFF(member) offsetof(struct dtrain_site_config, member)
#define SITE_INT(key, member, lo, hi) \
    {.name = key, .type = DTRAIN_SETTING_INT, .offset = SITE_OFF(member), .min = lo, .max = hi}
static const char *const domain_sources[] = {"nvml", "block", "ring", NULL}; /* enum dtrain_domain_source */
static const char *const visibilities[] = {"all", "one", NULL};
static const char *const cpu_binds[] = {"cores", "numa", NULL};

/* Every key plugstack.conf and the site file's "spank" object know, in the
 * order the "unknown key" answer lists them. */
static const struct dtrain_setting site_keys[] = {
    {.name = "config", .type = DTRAIN_SETTING_CUSTOM, .kind = S_CONFIG},
    {.name = "topology_xml", .type = DTRAIN_SETTING_TEXT, .kind = S_PATH, .offset = SITE_OFF(topology_xml),
     .size = DTRAIN_CONFIG_PATH_MAX},
    {.name = "bind", .type = DTRAIN_SETTING_BOOL, .offset = SITE_OFF(bind), .min = 0, .max = 1},
    {.name = "cpu_bind", .type = DTRAIN_SETTING_ENUM, .offset = SITE_OFF(cpu_bind_numa), .names = cpu_binds},
    {.name = "allow_pcie", .type = DTRAIN_SETTING_CUSTOM, .kind = S_PCIE},
    SITE_INT("max_tp", max_tp, 0, DTRAIN_TOPO_MAX_GPUS),
    SITE_INT("nvlink_domain_gpus", nvlink_domain_gpus, 0, DTRAIN_PLAN_MAX_DIM),
    {.name = "nvlink_domain_source", .type = DTRAIN_SETTING_ENUM, .offset = SITE_OFF(nvlink_domain_source),
     .names = domain_sources},
    {.name = "gpu_visibility", .type = DTRAIN_SETTING_ENUM, .offset = SITE_OFF(gpu_visibility_one),
     .names = visibilities},
    {.name = "master_ports", .type = DTRAIN_SETTING_CUSTOM, .kind = S_PORTS},
    SITE_INT("ports_per_step", ports_per_step, 1, DTRAIN_PORTS_PER_STEP_MAX),
    {.name = "imex_check", .type = DTRAIN_SETTING_BOOL, .offset = SITE_OFF(imex_check), .min = 0, .max = 1},
    {.name = "imex_channels", .type = DTRAIN_SETTING_TEXT, .kind = S_PATH, .offset = SITE_OFF(imex_channels),
     .size = DTRAIN_CONFIG_PATH_MAX},
    SITE_INT("net_gbps", net_gbps, 1, DTRAIN_EXPLAIN_GBPS_MAX),
    SITE_INT("pcie_gbps", pcie_gbps, 1, DTRAIN_EXPLAIN_GBPS_MAX),
    {.name = "expedited_requeue", .type = DTRAIN_SETTING_BOOL, .offset = SITE_OFF(expedited_requeue), .min = 0,
     .max = 1},
    {.name = NULL},
};

/* Apply key=value (key is not "config"). */
static int set_key(struct dtrain_site_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    const struct dtrain_setting *s = dtrain_settings_find(site_keys, NULL, key, strlen(key), 0);
    long v;
    if (s == NULL || s->kind == S_CONFIG) {
        char known[DTRAIN_SETTINGS_KNOWN_MAX];
        dtrain_settings_known(site_keys, NULL, known, sizeof known);
        dtrain_snprintf(err, errlen, "unknown key '%.64s' (known: %s)", key, known);
        return -1;
    }
    switch (s->kind) {
    case S_PATH:
        return set_path(dtrain_setting_field(s, cfg), key, value, err, errlen);
    case S_PCIE:
        return set_pcie(cfg, value, err, errlen);
    case S_PORTS:
        return dtrain_master_ports_parse(value, key, &cfg->master_port_lo, &cfg->master_port_hi, err, errlen);
    default:
        break;
    }
    switch (s->type) {
    case DTRAIN_SETTING_BOOL:
        return dtrain_parse_bool(value, key, dtrain_setting_field(s, cfg), err, errlen);
    case DTRAIN_SETTING_INT:
        if (dtrain_parse_int(value, (long)s->min, (long)s->max, key, &v, err, errlen) != 0)
            return -1;
        return dtrain_setting_store_integer(s, cfg, v);
    case DTRAIN_SETTING_ENUM:
        if (dtrain_setting_store_enum_word(s, cfg, value) != 0) {
            char words[128] = "";
            int n = 0;
            while (s->names[n] != NULL)
                n++;
            for (int i = 0; i < n; i++) /* "a or b", "a, b or c" */
                dtrain_snprintf(words + strlen(words), sizeof words - strlen(words), "%s%s",
                                i == 0 ? "" : i == n - 1 ? " or " : ", ", s->names[i]);
            dtrain_snprintf(err, errlen, "%s=%.64s: use %s", key, value, words);
            return -1;
        }
        return 0;
    default:
        dtrain_snprintf(err, errlen, "%s: internal error: unhandled key type", key);
        return -1;
    }
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

int dtrain_config_parse(struct dtrain_site_config *cfg, int ac, char **av, char *err, size_t errlen)
{
    char key[64], msg[512];
    const char *value;

    dtrain_config_init(cfg);
    /* Pass 1: check the syntax of every argument and load the site file. */
    for (int i = 0; i < ac; i++) {
        if (dtrain_settings_split(av[i], key, sizeof key, &value) != 0) {
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
        dtrain_settings_split(av[i], key, sizeof key, &value);
        if (strcmp(key, "config") == 0)
            continue;
        if (set_key(cfg, key, value, msg, sizeof msg) != 0) {
            dtrain_snprintf(err, errlen, "plugstack.conf: %s", msg);
            return -1;
        }
    }
    /* Keys that must agree, once every one is known. */
    if (dtrain_master_ports_check(cfg->master_port_lo, cfg->master_port_hi, cfg->ports_per_step, msg,
                                  sizeof msg) != 0) {
        dtrain_snprintf(err, errlen, "plugstack.conf: %s", msg);
        return -1;
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
