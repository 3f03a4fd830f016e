#include "serve/wire/chunk_text.h"

#include "orbit/common/json_string.h"

namespace orbit::serve {

ChunkText::ChunkText(const ResponseIds& ids, const std::string& object) : ids_(ids) {
  // The body's keys come out sorted (nlohmann::json's objects are std::maps): "choices" first, then these.
  nlohmann::json head = {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
  if (ids.usage_null) head["usage"] = nullptr;  // sorted last, as in the chunk builders' bodies
  const std::string fields = dump(head);
  tail_ = "," + fields.substr(1) + "\n\n";
}

std::string ChunkText::chat_text(const std::string& content, int64_t index, ChunkExtras extras) const {
  if (!content.empty() && extras.reasoning.empty() && extras.logprobs.empty()) {
    std::string event;
    event.reserve(content.size() + tail_.size() + 96);
    event += "data: {\"choices\":[{\"delta\":{\"content\":";
    if (append_json_string(event, content, InvalidUtf8::kRefuse)) {
      event += "},\"finish_reason\":null,\"index\":";
      event += std::to_string(index);
      event += ",\"logprobs\":null}]";
      event += tail_;
      return event;
    }
  }
  return sse(chat_chunk(ids_, content, false, "", index, std::move(extras)));
}

std::string ChunkText::completion_text(const std::string& text) const {
  std::string event;
  event.reserve(text.size() + tail_.size() + 96);
  event += "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"logprobs\":null,\"text\":";
  if (!append_json_string(event, text, InvalidUtf8::kRefuse)) return sse(text_completion(ids_, text, "", nullptr));
  event += "}]";
  event += tail_;
  return event;
}

}  // namespace orbit::serve
