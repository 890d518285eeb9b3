"""Tiny tokenizer GGUFs of the model families, each with the family's REAL chat template
(tests/templates/) and its special tokens as the family's vocabulary has them (control tokens
for what the tokenizer hides, user-defined ones for markers it spells as text), over the 256
byte-level tokens. Enough to run a family's prompt and a scripted reply through the real
tokenizer, the engine and the reply parsers (not imported by the app)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tiny_gguf import _byte_chars, write_tokenizer_gguf

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Family:
    template: str  # file name in tests/templates without .jinja
    control: tuple[str, ...]
    user: tuple[str, ...] = ()
    eos: str = ""
    bos: str | None = None
    extra: dict = field(default_factory=dict)


_CHATML = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_QWEN_USER = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>")
_MISTRAL = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]",
            "[/SYSTEM_PROMPT]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")

FAMILIES: dict[str, Family] = {
    "qwen3": Family("Qwen-Qwen3-0.6B", _CHATML, _QWEN_USER, eos="<|im_end|>"),
    "qwen3_coder": Family("Qwen3-Coder", _CHATML, _QWEN_USER, eos="<|im_end|>"),
    "llama3": Family("meta-llama-Llama-3.1-8B-Instruct",
                     ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                      "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"), eos="<|eot_id|>", bos="<|begin_of_text|>"),
    "mistral_nemo": Family("mistralai-Mistral-Nemo-Instruct-2407", _MISTRAL, eos="</s>", bos="<s>"),
    "mistral": Family("unsloth-mistral-Devstral-Small-2507", _MISTRAL, eos="</s>", bos="<s>"),
    "ministral_reasoning": Family("mistralai-Ministral-3-14B-Reasoning-2512", _MISTRAL, eos="</s>", bos="<s>"),
    "deepseek_r1": Family("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                          ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
                          ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                           "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<think>", "</think>"),
                          eos="<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>"),
    "kimi": Family("moonshotai-Kimi-K2",
                   ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                    "<|tool_call_argument_begin|>", "<|tool_call_end|>"), eos="<|im_end|>"),
    "glm": Family("GLM-4.6", ("<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                              "<|observation|>"),
                  ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                   "<think>", "</think>", "<tool_response>", "</tool_response>"), eos="<|endoftext|>"),
    "command_r7b": Family("CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                          ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>",
                           "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|START_THINKING|>", "<|END_THINKING|>",
                           "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"),
                          eos="<|END_OF_TURN_TOKEN|>", bos="<BOS_TOKEN>"),
    "granite": Family("ibm-granite-granite-3.3-2B-Instruct",
                      ("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"),
                      ("<think>", "</think>", "<response>", "</response>"), eos="<|end_of_text|>"),
}


def template_source(family: str) -> str:
    return (TEMPLATES / f"{FAMILIES[family].template}.jinja").read_text("utf-8")


def write_family_gguf(path: Path, family: str) -> Path:
    """A tokenizer GGUF of `family` (control + user-defined specials, the byte tokens)."""
    f = FAMILIES[family]
    # One merge: llama.cpp loads no byte-level BPE vocabulary without merges.
    tokens = [*f.control, *f.user, *_byte_chars(), "Ġt"]
    types = [3] * len(f.control) + [4] * len(f.user) + [1] * 257
    ids = {"eos": tokens.index(f.eos), "eot": tokens.index(f.eos)}
    if f.bos is not None:
        ids["bos"] = tokens.index(f.bos)
    return write_tokenizer_gguf(path, model="gpt2", pre="smollm", tokens=tokens, types=types, merges=["Ġ t"],
                                ids=ids, add_bos=False, name=family, template=template_source(family))


def family_tokenizer(tmp_path: Path, family: str):
    """(tokenizer, ChatTemplate) of `family`: the app's tokenizer, llama.cpp's over the file's
    vocabulary (`llamacpp.vocab`), which keeps the vocabulary loaded."""
    from turbospark_app.model.gguf.header import read_header
    from turbospark_app.model.llamacpp.model import LlamaCppModel
    from turbospark_app.model.llamacpp.vocab import load_tokenizer
    from turbospark_app.model.text.chat_template import ChatTemplate

    path = write_family_gguf(tmp_path / f"{family}.gguf", family)
    header = read_header(path)
    tok = load_tokenizer(header, LlamaCppModel.open(path, header=header, vocab_only=True))
    return tok, ChatTemplate.from_tokenizer(tok)
