"""A model pair on this machine: loading it (``pair``), the safetensors cache and the GGUF
conversion (``gguf_convert``, ``default_parts``), the KV model and the run clock (``kv``), its static-cache
compiled twin (``static_kv``), the busy-machine meter (``busy``), a vLLM server as the target
(``remote``, ``prometheus``, ``vllm_local``) and a delay relay before it (``relay``), the tiny
test pair (``tiny_pair``), the int8 draft (``int8``) and the cut draft head (``draft_head``)."""
