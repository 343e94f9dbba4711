/* ui.h - GET /ui: a page served by Strata itself that shows, request by
 * request, which tokens came from which cache tier and why a turn missed
 * (src/server/ui/: HTML, CSS and JavaScript built into the binary,
 * nothing fetched from elsewhere), and GET /ui/state, the small JSON the
 * page polls and scripts may read too.
 *
 * A tenant's key sees its own requests; the operator's credentials (those
 * of /metrics, server.c) see every tenant's and the tiers. The records
 * are server/recent.h's.
 * Does not: check keys (server.c's gate does, before this is called). */
#ifndef STRATA_UI_H
#define STRATA_UI_H

#include "server/server.h"

/* GET /ui, /ui/ and everything under it. */
void ui_get(server *s, const http_req *req, http_reply *rep);

/* An asset built into the binary (ui_assets.c), by file name
 * ("index.html", "app.js", "app.css"); 0 and *data NULL when there is none. */
size_t ui_asset(const char *name, const char **data, const char **content_type);

#endif
