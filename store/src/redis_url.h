// Shared by redis_client.cpp and redis_url.cpp: one endpoint's text as URLs, MOVED and CLUSTER SLOTS replies give it.
#pragma once

#include <string>

#include "orbit/store/redis_client.h"

namespace orbit::store {

// host:port, [IPv6]:port, or a bare IPv6 address with its port after the last ':'. Throws orbit::Error naming
// `url` (the remote as configured) on a malformed endpoint.
RedisEndpoint parse_endpoint(const std::string& url, const std::string& text);

}  // namespace orbit::store
