/*
 * xl_cfg_check FILE: reads an xl.cfg (fragment) the way xl does and says
 * what it parsed; exits 1 naming the first setting or list item that xl or
 * the domain build would refuse, 2 on bad usage or an unreadable file.
 *
 * It checks the settings `pvemuctl xen-config` emits, with the calls xl's
 * parse_config_data (tools/xl/xl_parse.c, Xen 4.17) makes for them:
 *   msr_relaxed  xlu_cfg_get_defbool
 *   vpmu         xlu_cfg_get_defbool
 *   tsc_mode     xlu_cfg_get_long (deprecated integer form), else
 *                xlu_cfg_get_string + libxl_tsc_mode_from_string
 *   cpuid        xlu_cfg_get_list + xlu_cfg_get_listitem, each item through
 *                libxl_cpuid_parse_config_xend (the "xend" list form)
 * xl only prints a cpuid item's parse error and goes on; this checker fails
 * instead, so a test cannot pass on a fragment xl would half ignore. It also
 * checks each register string's characters as xc_cpuid_xend_policy
 * (tools/libs/guest/xg_cpuid_x86.c) does when the domain is built: libxl's
 * parser takes any 32 characters, the build only '0', '1', 'x', 'k', 's'.
 *
 * Standalone C (no pvemu headers): it also runs in a Xen dom0.
 * Build: cc -o xl_cfg_check xl_cfg_check.c -lxlutil -lxenlight
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <libxl.h>
#include <libxlutil.h>

static int check_defbool(const XLU_Config *cfg, const char *name) {
    libxl_defbool value;
    libxl_defbool_unset(&value);
    int e = xlu_cfg_get_defbool(cfg, name, &value, 0);
    if (e == ESRCH) {
        printf("%s: not set\n", name);
        return 0;
    }
    if (e != 0) {
        fprintf(stderr, "xl_cfg_check: %s: not a boolean (xlu_cfg_get_defbool: %s)\n", name,
                strerror(e));
        return 1;
    }
    printf("%s: %s\n", name, libxl_defbool_val(value) ? "true" : "false");
    return 0;
}

static int check_tsc_mode(const XLU_Config *cfg) {
    long l;
    const char *buf;
    libxl_tsc_mode mode;
    if (!xlu_cfg_get_long(cfg, "tsc_mode", &l, 1)) {
        if (l < LIBXL_TSC_MODE_DEFAULT || l > LIBXL_TSC_MODE_NATIVE_PARAVIRT) {
            fprintf(stderr, "xl_cfg_check: tsc_mode: invalid value %ld\n", l);
            return 1;
        }
        printf("tsc_mode: %s (deprecated integer form)\n", libxl_tsc_mode_to_string(l));
        return 0;
    }
    if (xlu_cfg_get_string(cfg, "tsc_mode", &buf, 0)) {
        printf("tsc_mode: not set\n");
        return 0;
    }
    if (libxl_tsc_mode_from_string(buf, &mode)) {
        fprintf(stderr, "xl_cfg_check: tsc_mode: invalid value \"%s\"\n", buf);
        return 1;
    }
    printf("tsc_mode: %s\n", libxl_tsc_mode_to_string(mode));
    return 0;
}

/* The characters xc_cpuid_xend_policy accepts in each register string
 * (libxl_cpuid_parse_config_xend has already checked the shape). */
static const char *bad_register_char(const char *item) {
    const char *p = strchr(item, ':');
    while (p != NULL && (p = strchr(p, '=')) != NULL) {
        ++p;
        for (int i = 0; i < 32; ++i) {
            if (strchr("01xks", p[i]) == NULL || p[i] == '\0') return p + i;
        }
        p += 32;
    }
    return NULL;
}

static int check_cpuid(const XLU_Config *cfg) {
    XLU_ConfigList *cpuids;
    const char *buf;
    int count;
    int e = xlu_cfg_get_list(cfg, "cpuid", &cpuids, &count, 1);
    if (e == ESRCH) {
        printf("cpuid: not set\n");
        return 0;
    }
    if (e != 0) {
        /* xl then tries the "host,flag=..." string form; pvemu never
         * emits it, so anything but a list is an error here. */
        fprintf(stderr, "xl_cfg_check: cpuid: not a list (xlu_cfg_get_list: %s)\n",
                strerror(e));
        return 1;
    }
    libxl_cpuid_policy_list policy = NULL;
    int failed = 0;
    for (int i = 0; (buf = xlu_cfg_get_listitem(cpuids, i)) != NULL; i++) {
        const char *errstr = NULL;
        int r = libxl_cpuid_parse_config_xend(&policy, buf);
        switch (r) {
        case 0: break;
        /* The messages of xl_parse.c, for the same codes. */
        case 1: errstr = "illegal leaf number"; break;
        case 2: errstr = "illegal subleaf number"; break;
        case 3: errstr = "missing colon"; break;
        case 4: errstr = "invalid register name (must be e[abcd]x)"; break;
        case 5: errstr = "policy string must be exactly 32 characters long"; break;
        default: errstr = "unknown error"; break;
        }
        if (errstr != NULL) {
            fprintf(stderr, "xl_cfg_check: cpuid item %d \"%s\": error #%d: %s\n", i, buf, r,
                    errstr);
            failed = 1;
            break;
        }
        const char *bad = bad_register_char(buf);
        if (bad != NULL) {
            fprintf(stderr,
                    "xl_cfg_check: cpuid item %d \"%s\": character '%c' at offset %d: the "
                    "domain build takes only 0, 1, x, k, s\n",
                    i, buf, *bad ? *bad : '?', (int)(bad - buf));
            failed = 1;
            break;
        }
        printf("cpuid item %d: %s\n", i, buf);
    }
    if (!failed) printf("cpuid: %d items, %d policy entries\n", count,
                        libxl_cpuid_policy_list_length(&policy));
    libxl_cpuid_dispose(&policy);
    return failed;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: xl_cfg_check FILE\n");
        return 2;
    }
    XLU_Config *cfg = xlu_cfg_init(stderr, argv[1]);
    if (cfg == NULL) {
        fprintf(stderr, "xl_cfg_check: xlu_cfg_init failed: %s\n", strerror(errno));
        return 2;
    }
    int e = xlu_cfg_readfile(cfg, argv[1]);
    if (e != 0) {
        /* The parser has printed FILE:LINE: and what it expected. */
        fprintf(stderr, "xl_cfg_check: %s: not valid xl.cfg syntax (%s)\n", argv[1], strerror(e));
        xlu_cfg_destroy(cfg);
        return e == ENOENT || e == EACCES ? 2 : 1;
    }
    int failed = 0;
    failed |= check_defbool(cfg, "msr_relaxed");
    failed |= check_defbool(cfg, "vpmu");
    failed |= check_tsc_mode(cfg);
    failed |= check_cpuid(cfg);
    xlu_cfg_destroy(cfg);
    return failed ? 1 : 0;
}
