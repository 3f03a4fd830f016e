"""tokenizer.json through the CLI and the Python Engine: a Hugging Face directory's tokenizer.json is found
and used for text. Parity with Hugging Face's library on a corpus is test_hf_tokenizer_oracle's (C++)."""
import json
import pathlib
import shutil
import subprocess

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizers"


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=True)


def test_cli_tokenizes_with_tokenizer_json(orbit_cli):
    # The reference ids of TinyStories-656K's README (Hugging Face tokenizers).
    out = json.loads(run(orbit_cli, "tokenize", "--tokenizer", DATA / "tinystories-656k" / "tokenizer.json",
                         "--text", "Once upon a time").stdout)
    assert out["tokens"] == [1, 80, 147, 201, 282, 57]
    out = json.loads(run(orbit_cli, "tokenize", "--tokenizer", DATA / "gpt2" / "tokenizer.json", "--text",
                         "Hello world", "--no-bos", "--pieces").stdout)
    assert out == {"tokens": [15496, 995], "pieces": ["Hello", "\u0120world"]}


def byte_tokenizer(gpt2: dict) -> dict:
    """GPT-2's pipeline with only its 256 byte tokens and no merges: fits a 256-token model."""
    spec = dict(gpt2)
    model = dict(spec["model"])
    model["vocab"] = {t: i for t, i in gpt2["model"]["vocab"].items() if i < 256}
    model["merges"] = []
    spec["model"] = model
    spec["added_tokens"] = []
    return spec


def test_engine_reads_tokenizer_json_of_a_hugging_face_directory(orbit, models_dir, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(models_dir / "binding-gqa", model_dir)
    gpt2 = json.loads((DATA / "gpt2" / "tokenizer.json").read_text(encoding="utf-8"))
    (model_dir / "tokenizer.json").write_text(json.dumps(byte_tokenizer(gpt2)), encoding="utf-8")
    with orbit.Engine(str(model_dir), pool_bytes=8 << 20, page_size=4) as e:
        assert e.has_tokenizer
        text = "héllo 🙂"
        ids = e.tokenize(text, bos=False)
        assert ids == [gpt2["model"]["vocab"][c] for c in ["h", "Ã", "©", "l", "l", "o", "Ġ", "ð", "Ł", "Ļ", "Ĥ"]]
        assert e.detokenize(ids) == text
