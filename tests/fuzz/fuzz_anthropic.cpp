// Anthropic Messages request conversion (anthropic_chat_input, the output format, tool choice)
// and the prompt it renders to, through the Service of the built-in model: what a POST
// /v1/messages body reaches after JSON parsing. Bad requests must be ApiErrors (400/404).
#include "fuzz_util.h"
#include "server/anthropic_api.h"
#include "server_util.h"

using namespace hs;
using namespace hs::server;

// The vocabulary (or model) is loaded once before fuzzing, not inside the first input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)builtin();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ojson req = fuzz::request_object(data, size);
  if (req.is_null()) return 0;
  Builtin& b = builtin();
  try {
    const ChatInput in = anthropic_chat_input(b.svc, req);
    const ChatPromptIds p = b.svc.chat_prompt(in, ApiStyle::messages);
    fuzz::check_prompt_size(p.ids.size(), b.svc.ctx_size());
    (void)anthropic_output_spec(req, in);
  } catch (const ApiError& e) {
    fuzz::check_refusal_status(e.status());
  }
  return 0;
}
