/* api_openai.h - OpenAI-compatible endpoints. */
#ifndef STRATA_API_OPENAI_H
#define STRATA_API_OPENAI_H

#include "server/server.h"

void api_openai_chat(server *s, const http_req *req, http_reply *rep);        /* POST /v1/chat/completions */
void api_openai_completions(server *s, const http_req *req, http_reply *rep); /* POST /v1/completions */
void api_openai_models(server *s, const http_req *req, http_reply *rep);
/* An error reply in OpenAI's schema for a STRATA_E* code (api_dialect.fail;
 * the Responses API answers errors the same way). */
void api_openai_fail(http_reply *rep, int code, const char *msg);
void api_openai_model(server *s, const http_req *req, http_reply *rep);      /* GET /v1/models */
void api_openai_apply_template(server *s, const http_req *req, http_reply *rep); /* POST /apply-template */

#endif
