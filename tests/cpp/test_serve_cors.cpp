// The CORS policy of `orbit serve` (cli/serve/http/cors.h): --allow-origin's values read, normalized and
// refused naming the item; which request origins are granted; the fields an answer and a preflight carry.
// The HTTP side (every route, the front's refusals, streams) is tests/python/test_serve_cors.py's.
#include <string>

#include "orbit/common/error.h"
#include "orbit_catch.h"
#include "serve/http/cors.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

// The value of the first field named `name`, "" when there is none.
std::string field(const sv::HeaderFields& fields, const std::string& name) {
  for (const auto& [n, v] : fields) {
    if (n == name) return v;
  }
  return "";
}

// The message parse() throws for `value`, "" when it does not throw.
std::string parse_error(const std::string& value) {
  try {
    (void)sv::CorsPolicy::parse(value);
  } catch (const orbit::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("--allow-origin origins are normalized as browsers write an Origin", "[serve][cpu]") {
  const sv::CorsPolicy policy = sv::CorsPolicy::parse(
      "http://localhost:5173, HTTPS://App.Example:443,http://127.0.0.1:80,http://[::1]:8080,"
      "chrome-extension://abcdef,http://localhost:5173");
  CHECK(policy.enabled());
  CHECK_FALSE(policy.any());
  CHECK(policy.origins() == std::vector<std::string>{"http://localhost:5173", "https://app.example", "http://127.0.0.1",
                                                     "http://[::1]:8080", "chrome-extension://abcdef"});
  CHECK(policy.allowed("http://localhost:5173") == std::optional<std::string>("http://localhost:5173"));
  CHECK(policy.allowed("https://app.example") == std::optional<std::string>("https://app.example"));
  CHECK(policy.allowed("http://127.0.0.1") == std::optional<std::string>("http://127.0.0.1"));
  CHECK(policy.allowed("http://[::1]:8080").has_value());
  // The grant is the request's own Origin, byte for byte, whatever its case.
  CHECK(policy.allowed("HTTP://LOCALHOST:5173") == std::optional<std::string>("HTTP://LOCALHOST:5173"));
  for (const char* other : {"http://localhost:5174", "https://localhost:5173", "http://app.example", "http://localhost",
                            "null", "", "http://localhost:5173.evil.test"}) {
    CAPTURE(other);
    CHECK_FALSE(policy.allowed(other).has_value());
  }
}

TEST_CASE("a malformed --allow-origin is refused naming the argument and the item", "[serve][cpu]") {
  struct Case {
    const char* value;
    const char* says;
  };
  for (const Case& c :
       {Case{"localhost:3000", "item 1 'localhost:3000' is not an origin"},
        Case{"http://localhost:3000/", "ends in '/'"}, Case{"http://a.test/v1", "has a path"},
        Case{"http://a.test?x=1", "has a query"}, Case{"http://user@a.test", "names a user"},
        Case{"http://a.test:0", "'0' is not a port"}, Case{"http://a.test:65536", "'65536' is not a port"},
        Case{"http://a.test:", "'' is not a port"}, Case{"http://", "has no host"},
        Case{"http://a..test", "'a..test' is not a host"}, Case{"http://a!b.test", "'a!b.test' is not a host"},
        Case{"1http://a.test", "is not a scheme"}, Case{"null", "allow those with *"},
        Case{"http://a.test,", "item 2 is empty"}, Case{"", "item 1 is empty"},
        Case{"*,http://a.test", "* allows every origin already"},
        Case{"http://a.test, *", "* allows every origin already"}}) {
    CAPTURE(c.value);
    const std::string error = parse_error(c.value);
    CHECK(error.find("--allow-origin") != std::string::npos);
    CHECK(error.find(c.says) != std::string::npos);
  }
}

TEST_CASE("answers carry the grant for an allowed origin and Vary: Origin for every one", "[serve][cpu]") {
  const sv::CorsPolicy off;
  CHECK_FALSE(off.enabled());
  CHECK(off.answer_fields("http://localhost:5173").empty());
  CHECK(off.preflight_fields("http://localhost:5173", "POST", "").empty());

  const sv::CorsPolicy listed = sv::CorsPolicy::parse("http://localhost:5173");
  const sv::HeaderFields granted = listed.answer_fields("http://localhost:5173");
  CHECK(field(granted, "Vary") == "Origin");
  CHECK(field(granted, "Access-Control-Allow-Origin") == "http://localhost:5173");
  CHECK(field(granted, "Access-Control-Allow-Credentials") == "true");
  CHECK(field(granted, "Access-Control-Expose-Headers").find("Orbit-Stored") != std::string::npos);
  for (const char* other : {"http://evil.test", ""}) {  // not allowed, or no Origin: served, not granted
    const sv::HeaderFields fields = listed.answer_fields(other);
    REQUIRE(fields.size() == 1);
    CHECK(field(fields, "Vary") == "Origin");
  }

  const sv::CorsPolicy any = sv::CorsPolicy::parse("*");
  CHECK(any.any());
  const sv::HeaderFields star = any.answer_fields("http://anything.test:81");
  CHECK(field(star, "Access-Control-Allow-Origin") == "*");
  CHECK(field(star, "Access-Control-Allow-Credentials").empty());  // browsers refuse * with credentials
  CHECK(any.answer_fields("").size() == 1);                        // no Origin: not a cross-origin request
}

TEST_CASE("a preflight is granted the path's methods and the headers it asked for", "[serve][cpu]") {
  const sv::CorsPolicy listed = sv::CorsPolicy::parse("http://localhost:5173");
  const sv::HeaderFields asked =
      listed.preflight_fields("http://localhost:5173", "GET, HEAD, POST", " authorization,x-stainless-os ");
  CHECK(field(asked, "Access-Control-Allow-Methods") == "GET, HEAD, POST");
  CHECK(field(asked, "Access-Control-Allow-Headers") == "authorization,x-stainless-os");
  CHECK(field(asked, "Access-Control-Max-Age") == std::to_string(sv::kCorsMaxAgeSeconds));
  CHECK(field(asked, "Vary") == "Access-Control-Request-Headers");
  const sv::HeaderFields none = listed.preflight_fields("http://localhost:5173", "POST", "");
  for (const char* name : {"Authorization", "Content-Type", "OpenAI-Organization", "OpenAI-Project",
                           "X-Stainless-Package-Version", "X-Orbit-Session"}) {
    CHECK(field(none, "Access-Control-Allow-Headers").find(name) != std::string::npos);
  }
  CHECK(listed.preflight_fields("http://evil.test", "POST", "authorization").empty());
}

}  // namespace ORBIT_TEST_FILE
