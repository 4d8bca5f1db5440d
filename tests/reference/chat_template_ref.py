#!/usr/bin/env python3
"""Renders chat messages with the Qwen2-VL-2B-Instruct Jinja chat template (as shipped in its
tokenizer_config.json), using jinja2 the way transformers' apply_chat_template does
(trim_blocks + lstrip_blocks, a sandboxed environment).

usage: chat_template_ref.py < requests.json   where requests.json is a list of
  {"messages": [...HF-style messages...], "add_generation_prompt": true, "add_vision_id": false}
Writes a JSON list of the rendered prompts to stdout.
"""
import json
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(QWEN2_VL_CHAT_TEMPLATE)
    out = [tmpl.render(messages=req["messages"],
                       add_generation_prompt=req.get("add_generation_prompt", False),
                       add_vision_id=req.get("add_vision_id", False))
           for req in json.load(sys.stdin)]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
