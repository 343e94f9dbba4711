/* ui_assets.c - the /ui page's files, built into the binary.
 *
 * The files stay real .html/.css/.js files in src/server/ui/ (edited and
 * reviewed as such); the assembler's .incbin copies their bytes into
 * .rodata at compile time, so the build needs no generator and no
 * network, and the binary needs no files beside it. The paths are
 * relative to the repository root, where make runs the compiler; the
 * Makefile makes this object depend on the files. */
#include "server/ui.h"

#include <string.h>

/* name: the symbols NAME and NAME_end around the file's bytes. */
#define UI_EMBED(name, file)                                                                                \
    __asm__(".section .rodata\n.global " #name "\n.global " #name "_end\n.balign 16\n" #name ":\n"            \
            ".incbin \"" file "\"\n" #name "_end:\n.byte 0\n.previous\n");                                 \
    extern const char name[], name##_end[];

UI_EMBED(strata_ui_index_html, "src/server/ui/index.html")
UI_EMBED(strata_ui_app_js, "src/server/ui/app.js")
UI_EMBED(strata_ui_app_css, "src/server/ui/app.css")

typedef struct ui_file {
    const char *name, *type;
    const char *start, *end;
} ui_file;

size_t ui_asset(const char *name, const char **data, const char **content_type) {
    const ui_file files[] = {
        {"index.html", "text/html; charset=utf-8", strata_ui_index_html, strata_ui_index_html_end},
        {"app.js", "text/javascript; charset=utf-8", strata_ui_app_js, strata_ui_app_js_end},
        {"app.css", "text/css; charset=utf-8", strata_ui_app_css, strata_ui_app_css_end},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (!strcmp(name, files[i].name)) {
            *data = files[i].start;
            *content_type = files[i].type;
            return (size_t)(files[i].end - files[i].start);
        }
    *data = NULL;
    *content_type = NULL;
    return 0;
}
