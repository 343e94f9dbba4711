/* api_anthropic.h - Anthropic-compatible endpoints. */
#ifndef STRATA_API_ANTHROPIC_H
#define STRATA_API_ANTHROPIC_H

#include "server/server.h"

void api_anthropic_messages(server *s, const http_req *req, http_reply *rep);     /* POST /v1/messages */
void api_anthropic_count_tokens(server *s, const http_req *req, http_reply *rep); /* POST /v1/messages/count_tokens */

#endif
