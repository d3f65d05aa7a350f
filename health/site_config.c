/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-health site config: strict JSON reading; see config.h.
 *
 * The schema is a settings table (common/dtrain_settings.h) per JSON object:
 * each known key says its type, where it goes in struct health_config and
 * its range, so that unknown keys, wrong types and bad values all get the
 * same kind of one-line answer naming the key's full path. */
#include "site_config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_parse.h"
#include "dtrain_settings.h"

/* A site config larger than this is refused. */
#define HEALTH_CONFIG_MAX_BYTES (1 << 20)

static const char *const check_names[HEALTH_CHECK_COUNT] = {
    [HEALTH_CHECK_GPU_COUNT] = "gpu_count",
    [HEALTH_CHECK_GPU_MODEL] = "gpu_model",
    [HEALTH_CHECK_NVLINK] = "nvlink",
    [HEALTH_CHECK_NVML] = "nvml",
    [HEALTH_CHECK_ECC] = "ecc",
    [HEALTH_CHECK_RETIRED_MEMORY] = "retired_memory",
    [HEALTH_CHECK_XID] = "xid",
    [HEALTH_CHECK_NVLINK_ERRORS] = "nvlink_errors",
    [HEALTH_CHECK_GPU_MEMORY] = "gpu_memory",
    [HEALTH_CHECK_GPU_PROCESSES] = "gpu_processes",
    [HEALTH_CHECK_CHECKPOINT_FS] = "checkpoint_fs",
    [HEALTH_CHECK_SHM] = "shm",
    [HEALTH_CHECK_INFINIBAND] = "infiniband",
    [HEALTH_CHECK_IMEX] = "imex",
};

const char *health_check_name(enum health_check_id id)
{
    return (id >= 0 && id < HEALTH_CHECK_COUNT) ? check_names[id] : "unknown";
}

void health_config_defaults(struct health_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    dtrain_snprintf(cfg->sysfs_root, sizeof(cfg->sysfs_root), "/sys");
    cfg->gpu_count = -1;
    for (int i = 0; i < HEALTH_CHECK_COUNT; i++)
        cfg->enabled[i] = 1;
    cfg->timeout_ms.topology = 10000;
    cfg->timeout_ms.nvml = 15000;   /* nvmlInit alone takes seconds without persistence mode */
    cfg->timeout_ms.filesystem = 5000;
    cfg->timeout_ms.infiniband = 2000;
    cfg->timeout_ms.imex = 5000;
    dtrain_snprintf(cfg->imex.ctl, sizeof(cfg->imex.ctl), "%s", HEALTH_IMEX_CTL_DEFAULT);
    cfg->timeout_ms.drain = HEALTH_DRAIN_TIMEOUT_MS;
    cfg->nvlink.tolerance_percent = 0;
    cfg->ecc.max_uncorrected = 0;
    cfg->ecc.max_corrected = HEALTH_NO_LIMIT;
    cfg->retired.max_retired_pages = 60;   /* NVIDIA's RMA threshold for page retirement */
    cfg->retired.max_uncorrected_rows = HEALTH_NO_LIMIT;
    /* Application faults that say nothing about the GPU's health:
     * 13 graphics engine exception, 31 MMU fault, 43 reset channel
     * verification error, 45 preemptive cleanup. */
    static const unsigned benign_xids[] = {13, 31, 43, 45};
    cfg->xid.nignore = (int)(sizeof(benign_xids) / sizeof(benign_xids[0]));
    memcpy(cfg->xid.ignore, benign_xids, sizeof(benign_xids));
    cfg->nvlink_errors.max_replay = HEALTH_NO_LIMIT;
    cfg->nvlink_errors.max_recovery = 0;
    cfg->nvlink_errors.max_crc = HEALTH_NO_LIMIT;
    cfg->gpu_memory_max_used = 2LL << 30;  /* driver-reserved memory counts as used */
    cfg->gpu_processes_grace_ms = 2000;
    dtrain_snprintf(cfg->shm.path, sizeof(cfg->shm.path), "/dev/shm");
    cfg->shm.min_free_bytes = 1LL << 30;
}

int health_parse_size(const char *text, const char *what, long long *out, char *err, size_t errlen)
{
    static const struct { const char *suffix; long long mult; } units[] = {
        {"", 1}, {"B", 1},
        {"KB", 1000LL}, {"MB", 1000LL * 1000}, {"GB", 1000LL * 1000 * 1000}, {"TB", 1000LL * 1000 * 1000 * 1000},
        {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"TiB", 1LL << 40},
    };
    char digits[32];
    size_t n = 0;
    while (text[n] >= '0' && text[n] <= '9')
        n++;
    if (n == 0 || n >= sizeof(digits))
        goto bad;
    memcpy(digits, text, n);
    digits[n] = '\0';
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        if (strcmp(text + n, units[u].suffix) != 0)
            continue;
        long v;
        char sub[128];
        long long limit = (1LL << 60) / units[u].mult;
        if (dtrain_parse_int(digits, 0, (long)limit, what, &v, sub, sizeof(sub)) != 0)
            goto bad;
        *out = (long long)v * units[u].mult;
        return 0;
    }
bad:
    dtrain_snprintf(err, errlen, "%s: '%.64s' is not a size (write bytes as a whole number, or e.g. \"100GiB\", \"512MB\")",
                    what, text);
    return -1;
}

/* ------------------------------------------------------------ the schema */
/* health's refinements of the common types (struct dtrain_setting.kind) */
enum health_kind {
    H_PLAIN,       /* the common type as it is */
    H_LIMIT,       /* LLONG >= 0, or null = HEALTH_NO_LIMIT */
    H_SIZE,        /* LLONG bytes: integer or "100GiB" */
    H_PATH,        /* TEXT, "%n" expanded to the node name */
    H_TOPOLOGY,    /* CUSTOM: parse_topology */
    H_ECC_COUNTER, /* CUSTOM: parse_ecc_counter */
    H_XID_IGNORE,  /* CUSTOM: parse_xid_ignore */
    H_IB_PORTS,    /* CUSTOM: parse_ib_ports */
};

struct parse_ctx {
    struct health_config *cfg;
    const char *node;
    char *err;
    size_t errlen;
};

#define CFG_OFF(member) offsetof(struct health_config, member)
#define CFG_SIZE(member) sizeof(((struct health_config *)0)->member)
#define NO_MAX 9.3e18 /* above LLONG_MAX: no upper limit */
#define INT(key, member, lo, hi) {.name = key, .type = DTRAIN_SETTING_INT, .offset = CFG_OFF(member), .min = lo, .max = hi}
#define NUMBER(key, member, lo, hi) {.name = key, .type = DTRAIN_SETTING_REAL, .offset = CFG_OFF(member), .min = lo, .max = hi}
#define ENABLED(id) {.name = "enabled", .type = DTRAIN_SETTING_BOOL, .offset = CFG_OFF(enabled[id]), .min = 0, .max = 1}
#define MS(key, member) INT(key, member, 1, 3600000)
#define LIMIT(key, member) {.name = key, .type = DTRAIN_SETTING_LLONG, .kind = H_LIMIT, .offset = CFG_OFF(member), .min = 0, .max = NO_MAX}
#define TEXT(key, member) {.name = key, .type = DTRAIN_SETTING_TEXT, .offset = CFG_OFF(member), .size = CFG_SIZE(member)}
#define PATH(key, member) {.name = key, .type = DTRAIN_SETTING_TEXT, .kind = H_PATH, .offset = CFG_OFF(member), .size = CFG_SIZE(member)}
#define SIZE(key, member) {.name = key, .type = DTRAIN_SETTING_LLONG, .kind = H_SIZE, .offset = CFG_OFF(member), .min = 0, .max = NO_MAX}
#define OBJECT(key, table) {.name = key, .type = DTRAIN_SETTING_OBJECT, .fields = table}
#define CUSTOM(key, which) {.name = key, .type = DTRAIN_SETTING_CUSTOM, .kind = which}
#define END {.name = NULL}

static int parse_topology(struct parse_ctx *ctx, const char *where, json_t *value);
static int parse_ecc_counter(struct parse_ctx *ctx, const char *where, json_t *value);
static int parse_xid_ignore(struct parse_ctx *ctx, const char *where, json_t *value);
static int parse_ib_ports(struct parse_ctx *ctx, const char *where, json_t *value);

static const struct dtrain_setting gpus_keys[] = {
    INT("count", gpu_count, 0, HEALTH_MAX_GPUS), TEXT("model", gpu_model), END,
};
static const struct dtrain_setting timeout_keys[] = {
    MS("topology", timeout_ms.topology), MS("nvml", timeout_ms.nvml),
    MS("filesystem", timeout_ms.filesystem), MS("infiniband", timeout_ms.infiniband),
    MS("imex", timeout_ms.imex), MS("drain", timeout_ms.drain), END,
};
static const struct dtrain_setting gpu_count_keys[] = {ENABLED(HEALTH_CHECK_GPU_COUNT), END};
static const struct dtrain_setting gpu_model_keys[] = {ENABLED(HEALTH_CHECK_GPU_MODEL), END};
static const struct dtrain_setting nvlink_keys[] = {
    ENABLED(HEALTH_CHECK_NVLINK),
    NUMBER("min_bandwidth_gbps", nvlink.min_bandwidth_gbps, 0, 100000),
    PATH("reference_topology", nvlink.reference),
    NUMBER("tolerance_percent", nvlink.tolerance_percent, 0, 100),
    INT("min_largest_island", nvlink.min_largest_island, 0, HEALTH_MAX_GPUS),
    INT("min_active_links", nvlink.min_active_links, 0, HEALTH_MAX_NVLINKS),
    END,
};
static const struct dtrain_setting nvml_keys[] = {ENABLED(HEALTH_CHECK_NVML), END};
static const struct dtrain_setting ecc_keys[] = {
    ENABLED(HEALTH_CHECK_ECC), CUSTOM("counter", H_ECC_COUNTER),
    LIMIT("max_uncorrected", ecc.max_uncorrected), LIMIT("max_corrected", ecc.max_corrected), END,
};
static const struct dtrain_setting retired_keys[] = {
    ENABLED(HEALTH_CHECK_RETIRED_MEMORY), LIMIT("max_retired_pages", retired.max_retired_pages),
    LIMIT("max_uncorrected_remapped_rows", retired.max_uncorrected_rows), END,
};
static const struct dtrain_setting xid_keys[] = {
    ENABLED(HEALTH_CHECK_XID), INT("wait_ms", xid.wait_ms, 0, 600000), CUSTOM("ignore", H_XID_IGNORE), END,
};
static const struct dtrain_setting nvlink_errors_keys[] = {
    ENABLED(HEALTH_CHECK_NVLINK_ERRORS), LIMIT("max_replay", nvlink_errors.max_replay),
    LIMIT("max_recovery", nvlink_errors.max_recovery), LIMIT("max_crc", nvlink_errors.max_crc), END,
};
static const struct dtrain_setting gpu_memory_keys[] = {
    ENABLED(HEALTH_CHECK_GPU_MEMORY), SIZE("max_used", gpu_memory_max_used), END,
};
static const struct dtrain_setting gpu_processes_keys[] = {
    ENABLED(HEALTH_CHECK_GPU_PROCESSES), INT("grace_ms", gpu_processes_grace_ms, 0, 600000), END,
};
static const struct dtrain_setting checkpoint_keys[] = {
    ENABLED(HEALTH_CHECK_CHECKPOINT_FS), PATH("path", checkpoint_fs.path),
    SIZE("min_free", checkpoint_fs.min_free_bytes), END,
};
static const struct dtrain_setting shm_keys[] = {
    ENABLED(HEALTH_CHECK_SHM), PATH("path", shm.path), SIZE("min_free", shm.min_free_bytes), END,
};
static const struct dtrain_setting infiniband_keys[] = {
    ENABLED(HEALTH_CHECK_INFINIBAND), CUSTOM("ports", H_IB_PORTS),
    NUMBER("min_rate_gbps", infiniband.min_rate_gbps, 0, 100000), END,
};
static const struct dtrain_setting imex_keys[] = {
    ENABLED(HEALTH_CHECK_IMEX),
    {.name = "always", .type = DTRAIN_SETTING_BOOL, .offset = CFG_OFF(imex.always), .min = 0, .max = 1},
    PATH("ctl", imex.ctl), END,
};
static const struct dtrain_setting checks_keys[] = {
    OBJECT("gpu_count", gpu_count_keys), OBJECT("gpu_model", gpu_model_keys),
    OBJECT("nvlink", nvlink_keys), OBJECT("nvml", nvml_keys), OBJECT("ecc", ecc_keys),
    OBJECT("retired_memory", retired_keys), OBJECT("xid", xid_keys),
    OBJECT("nvlink_errors", nvlink_errors_keys), OBJECT("gpu_memory", gpu_memory_keys),
    OBJECT("gpu_processes", gpu_processes_keys), OBJECT("checkpoint_fs", checkpoint_keys),
    OBJECT("shm", shm_keys), OBJECT("infiniband", infiniband_keys), OBJECT("imex", imex_keys), END,
};
static const struct dtrain_setting top_keys[] = {
    CUSTOM("topology", H_TOPOLOGY),
    PATH("sysfs_root", sysfs_root),
    PATH("nvml_library", nvml_library),
    OBJECT("gpus", gpus_keys),
    OBJECT("timeouts_ms", timeout_keys),
    OBJECT("checks", checks_keys),
    END,
};

/* ------------------------------------------------------------ values */
static int fail(struct parse_ctx *ctx, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct parse_ctx *ctx, const char *where, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    dtrain_snprintf(ctx->err, ctx->errlen, "%s: %s: %s", ctx->cfg->file, where, what);
    return -1;
}

/* health's words for the JSON types */
static const struct dtrain_settings_reader health_words = {
    .integer_words = "a whole number", .real_words = "a number with a fraction",
};

static const char *json_kind(const json_t *v)
{
    return dtrain_settings_json_kind(&health_words, v);
}

/* Copy text with "%n" replaced by the node name and "%%" by "%". */
static int expand_path(struct parse_ctx *ctx, const char *where, const char *text, char *out, size_t outlen)
{
    switch (dtrain_expand_node(text, ctx->node, out, outlen)) {
    case 0:
        return 0;
    case -2:
        return fail(ctx, where, "'%.200s' uses %%n but the node name is unknown (give --node)", text);
    default:
        return fail(ctx, where, "'%.200s' is too long once expanded", text);
    }
}

static int parse_value(const struct dtrain_settings_reader *r, const struct dtrain_setting *spec,
                       const char *where, json_t *v)
{
    struct parse_ctx *ctx = r->ctx;
    char num[64];
    switch (spec->kind) {
    case H_TOPOLOGY: return parse_topology(ctx, where, v);
    case H_ECC_COUNTER: return parse_ecc_counter(ctx, where, v);
    case H_XID_IGNORE: return parse_xid_ignore(ctx, where, v);
    case H_IB_PORTS: return parse_ib_ports(ctx, where, v);
    case H_LIMIT:
        if (json_is_null(v)) {
            *(long long *)dtrain_setting_field(spec, r->base) = HEALTH_NO_LIMIT;
            return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return fail(ctx, where, "expected a whole number >= 0, or null for no limit; got %s",
                        json_is_integer(v) ? "a negative number" : json_kind(v));
        return dtrain_setting_store_integer(spec, r->base, json_integer_value(v));
    case H_SIZE:
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            return dtrain_setting_store_integer(spec, r->base, json_integer_value(v));
        if (json_is_string(v)) {
            char sub[256];
            if (health_parse_size(json_string_value(v), where, (long long *)dtrain_setting_field(spec, r->base),
                                  sub, sizeof(sub)) == 0)
                return 0;
            dtrain_snprintf(ctx->err, ctx->errlen, "%s: %s", ctx->cfg->file, sub);
            return -1;
        }
        return fail(ctx, where, "expected a size (bytes, or a string like \"100GiB\"), got %s", json_kind(v));
    default:
        break;
    }
    switch (spec->type) {
    case DTRAIN_SETTING_BOOL:
        if (!json_is_boolean(v))
            return fail(ctx, where, "expected true or false, got %s", json_kind(v));
        return dtrain_setting_store_integer(spec, r->base, json_is_true(v));
    case DTRAIN_SETTING_INT:
        if (!json_is_integer(v) || dtrain_setting_store_integer(spec, r->base, json_integer_value(v)) != 0) {
            dtrain_snprintf(num, sizeof(num), "%.0f to %.0f", spec->min, spec->max);
            if (!json_is_integer(v))
                return fail(ctx, where, "expected a whole number, got %s", json_kind(v));
            return fail(ctx, where, "out of range (use a whole number from %s)", num);
        }
        return 0;
    case DTRAIN_SETTING_REAL:
        if (!json_is_number(v))
            return fail(ctx, where, "expected a number, got %s", json_kind(v));
        if (dtrain_setting_store_real(spec, r->base, json_number_value(v)) != 0) {
            dtrain_snprintf(num, sizeof(num), "%g to %g", spec->min, spec->max);
            return fail(ctx, where, "out of range (use a number from %s)", num);
        }
        return 0;
    case DTRAIN_SETTING_TEXT: {
        if (!json_is_string(v))
            return fail(ctx, where, "expected a string, got %s", json_kind(v));
        const char *s = json_string_value(v);
        if (strlen(s) != json_string_length(v))
            return fail(ctx, where, "the string contains a NUL byte");
        if (spec->kind == H_PATH)
            return expand_path(ctx, where, s, dtrain_setting_field(spec, r->base), spec->size);
        if (dtrain_setting_store_text(spec, r->base, s, strlen(s)) != 0)
            return fail(ctx, where, "'%.64s...' is too long", s);
        return 0;
    }
    default:
        break;
    }
    return fail(ctx, where, "internal error: unhandled key type");
}

static int unknown_key(const struct dtrain_settings_reader *r, const char *parent, const char *where,
                       const char *key, const char *known)
{
    (void)parent;
    (void)key;
    return fail(r->ctx, where, "unknown key (known: %s)", known);
}

static int not_object(const struct dtrain_settings_reader *r, const char *where, json_t *value)
{
    return fail(r->ctx, where[0] ? where : "(top level)", "expected an object {...}, got %s", json_kind(value));
}

/* ------------------------------------------------------------ special keys */
static int parse_topology(struct parse_ctx *ctx, const char *where, json_t *value)
{
    if (!json_is_string(value))
        return fail(ctx, where, "expected \"live\" or the path of a saved hwloc XML file, got %s", json_kind(value));
    if (strcmp(json_string_value(value), "live") == 0) {
        ctx->cfg->topology[0] = '\0';
        return 0;
    }
    if (json_string_value(value)[0] == '\0')
        return fail(ctx, where, "empty (write \"live\" or a path)");
    return expand_path(ctx, where, json_string_value(value), ctx->cfg->topology, sizeof(ctx->cfg->topology));
}

static int parse_ecc_counter(struct parse_ctx *ctx, const char *where, json_t *value)
{
    const char *s = json_is_string(value) ? json_string_value(value) : "";
    if (strcmp(s, "volatile") == 0)
        ctx->cfg->ecc.aggregate = 0;
    else if (strcmp(s, "aggregate") == 0)
        ctx->cfg->ecc.aggregate = 1;
    else
        return fail(ctx, where, "expected \"volatile\" or \"aggregate\", got %s",
                    json_is_string(value) ? "another string" : json_kind(value));
    return 0;
}

static int parse_xid_ignore(struct parse_ctx *ctx, const char *where, json_t *value)
{
    size_t i;
    json_t *item;
    if (!json_is_array(value))
        return fail(ctx, where, "expected an array of XID numbers, got %s", json_kind(value));
    if (json_array_size(value) > HEALTH_MAX_IGNORED_XIDS)
        return fail(ctx, where, "too many entries (at most 64)");
    json_array_foreach(value, i, item) {
        if (!json_is_integer(item) || json_integer_value(item) < 1 || json_integer_value(item) > 65535)
            return fail(ctx, where, "entries must be XID numbers from 1 to 65535, got %s",
                        json_is_integer(item) ? "a number out of range" : json_kind(item));
        ctx->cfg->xid.ignore[i] = (unsigned)json_integer_value(item);
    }
    ctx->cfg->xid.nignore = (int)json_array_size(value);
    return 0;
}

static int parse_ib_ports(struct parse_ctx *ctx, const char *where, json_t *value)
{
    size_t i;
    json_t *item;
    if (!json_is_array(value))
        return fail(ctx, where, "expected an array like [\"mlx5_0:1\"], got %s", json_kind(value));
    if (json_array_size(value) > HEALTH_MAX_IB_PORTS)
        return fail(ctx, where, "too many ports (at most 64)");
    json_array_foreach(value, i, item) {
        struct health_ib_port_spec *p = &ctx->cfg->infiniband.ports[i];
        const char *s = json_is_string(item) ? json_string_value(item) : NULL;
        const char *colon = s ? strrchr(s, ':') : NULL;
        long port;
        char sub[128];
        if (!colon || colon == s || (size_t)(colon - s) >= sizeof(p->device) || strchr(s, '/') ||
            dtrain_parse_int(colon + 1, 1, 255, "port", &port, sub, sizeof(sub)) != 0)
            return fail(ctx, where, "entries must be \"DEVICE:PORT\" such as \"mlx5_0:1\", got '%.64s'",
                        s ? s : json_kind(item));
        memcpy(p->device, s, (size_t)(colon - s));
        p->device[colon - s] = '\0';
        p->port = (unsigned)port;
    }
    ctx->cfg->infiniband.nports = (int)json_array_size(value);
    return 0;
}

/* ------------------------------------------------------------ load */
/* Files named by the config must be readable now: a typo is a config
 * error (exit 2), not a sick node. */
static int check_readable(struct parse_ctx *ctx, const char *where, const char *path)
{
    char why[1200];
    if (!path[0])
        return 0;
    int fd = dtrain_open_regular(path, O_RDONLY, "the file", NULL, why, sizeof why);
    if (fd < 0)
        return fail(ctx, where, "%s", why);
    close(fd);
    return 0;
}

int health_config_load(const char *path, const char *node, struct health_config *cfg,
                       char *err, size_t errlen)
{
    struct parse_ctx ctx = {.cfg = cfg, .node = node, .err = err, .errlen = errlen};
    json_error_t jerr;
    int rc = -1;

    health_config_defaults(cfg);
    if (dtrain_snprintf(cfg->file, sizeof(cfg->file), "%s", path) != 0) {
        dtrain_snprintf(err, errlen, "config path too long: %.64s...", path);
        return -1;
    }
    /* As root (the prolog) the file must be one root may trust: no link,
     * root-owned file and folders (common/dtrain_file.h); otherwise a
     * regular file, opened without blocking. */
    char why[1200];
    int fd = geteuid() == 0 ? dtrain_open_trusted(path, "the config", HEALTH_CONFIG_MAX_BYTES, why, sizeof why)
                            : dtrain_open_regular(path, O_RDONLY, "the config", NULL, why, sizeof why);
    if (fd < 0) {
        dtrain_snprintf(err, errlen, "%s (give --config FILE)", why);
        return -1;
    }
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (!root) {
        dtrain_snprintf(err, errlen, "%s: line %d, column %d: %s", path, jerr.line, jerr.column, jerr.text);
        return -1;
    }
    struct dtrain_settings_reader reader = health_words;
    reader.base = cfg;
    reader.ctx = &ctx;
    reader.set_json = parse_value;
    reader.unknown = unknown_key;
    reader.not_object = not_object;
    rc = dtrain_settings_walk_json(&reader, top_keys, NULL, "", root);
    json_decref(root);
    if (rc == 0)
        rc = check_readable(&ctx, "topology", cfg->topology);
    if (rc == 0)
        rc = check_readable(&ctx, "checks.nvlink.reference_topology", cfg->nvlink.reference);
    return rc;
}
