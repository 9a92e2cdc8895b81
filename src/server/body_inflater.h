// Streaming inflate of a request body sent with Content-Encoding gzip or deflate (zlib), with
// a cap on what it inflates to: a small compressed body cannot make the server hold more than
// the body limit, and inflating stops (with an error) as soon as the cap is passed.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace hs::server {

class BodyInflater {
 public:
  enum class Coding { gzip, deflate };
  BodyInflater(Coding coding, size_t cap);
  ~BodyInflater();
  BodyInflater(const BodyInflater&) = delete;
  BodyInflater& operator=(const BodyInflater&) = delete;

  enum class Result { ok, too_large, bad_data };
  // Inflates `in` onto the end of `out`; too_large once `out` would pass the cap.
  Result feed(std::string_view in, std::string& out);
  // Whether the compressed stream ended (a body that stops earlier is truncated).
  bool finished() const;

 private:
  struct Z;
  std::unique_ptr<Z> z_;
  size_t cap_;
};

}  // namespace hs::server
