/* api_responses.h - the OpenAI Responses API (api_responses.c). */
#ifndef STRATA_API_RESPONSES_H
#define STRATA_API_RESPONSES_H

#include "server/server.h"

void api_responses_create(server *s, const http_req *req, http_reply *rep); /* POST /v1/responses */
/* GET /v1/responses/{id}, GET /v1/responses/{id}/input_items, DELETE /v1/responses/{id} */
void api_responses_item(server *s, const http_req *req, http_reply *rep);

#endif
