// How an answer's server-sent events go out: chunked to an HTTP/1.1 client, and to an HTTP/1.0 client, which has
// no chunked transfer coding (RFC 9112 section 6.1: a server must not send it one), as the bytes they are, the
// connection's close ending them. Used by the model endpoints (serve_generate.cpp) and the Responses API
// (responses_http.cpp).
#pragma once

#include <httplib.h>

#include <utility>

namespace orbit::serve {

inline void set_event_stream(const httplib::Request& req, httplib::Response& res,
                             httplib::ContentProviderWithoutLength provider) {
  if (req.version == "HTTP/1.0") {
    res.set_content_provider("text/event-stream", std::move(provider));
  } else {
    res.set_chunked_content_provider("text/event-stream", std::move(provider));
  }
}

}  // namespace orbit::serve
