"""Updates of a stored chat completion's metadata (POST /v1/chat/completions/{id}) racing each other: each
answers with the metadata it wrote, as OpenAI's update returns the completion as that call left it. The answer
was read after the update's lock was let go, so another update (or a delete) in between answered this call
with that one's metadata (8 writers of 60 updates each: 6 and 11 of 480 in two runs of a probe). The server is started here on
127.0.0.1 (a free port) and stopped; nothing is timed."""
import threading

from conftest import post_json
from serve_wire import MODEL_NAME

WRITERS = 8
UPDATES = 100  # per writer


def test_each_racing_metadata_update_answers_with_what_it_wrote(stories_server):
    address = stories_server
    status, created = post_json(address, "/v1/chat/completions", {
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Once"}], "max_tokens": 2, "store": True,
        "metadata": {"w": "start"}})
    assert status == 200, created
    path = "/v1/chat/completions/" + created["id"]
    wrong = []
    lock = threading.Lock()

    def writer(w):
        for k in range(UPDATES):
            metadata = {"w": str(w), "k": str(k)}
            status, answer = post_json(address, path, {"metadata": metadata})
            if status != 200 or answer.get("metadata") != metadata:
                with lock:
                    wrong.append((metadata, status, answer.get("metadata", answer)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [], f"{len(wrong)} of {WRITERS * UPDATES} updates answered otherwise: {wrong[:3]}"
