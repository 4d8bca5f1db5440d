// The registry of model families: the only way from a checkpoint folder to a model. A family is
// chosen by config.json's "architectures" (or "model_type" when that is absent); a checkpoint of
// any other architecture is refused with a message listing the supported ones.
#pragma once

#include <span>
#include <string>

#include "models/checkpoint.h"  // load_tokenizer, check_tokenizer
#include "models/model.h"

namespace mmrt::models {

// Every family, in a fixed order (the table in registry.cpp).
std::span<const ModelFamily* const> families();

// The family of the checkpoint in `dir` (its config.json). NotFound without config.json;
// FormatError for a malformed one; Unimplemented for an unsupported architecture.
const ModelFamily& family_for_checkpoint(const std::string& dir);
// By ModelFamily::name; InvalidArgument listing the names otherwise.
const ModelFamily& family_named(const std::string& name);
// "Qwen2VLForConditionalGeneration (qwen2-vl), ..." for messages and --help.
std::string supported_architectures();

// family_for_checkpoint(dir).load_processor(dir): the processor load_model would give.
std::unique_ptr<Processor> load_processor(const std::string& dir);

// `family`'s model from `dir` on `be`: Unimplemented, listing the ops the backend lacks, before
// anything is read when the backend cannot run the family (ModelFamily::ops); then
// family.load(be, dir, opts).
Model load_model(const ModelFamily& family, const kernels::Backend& be, const std::string& dir,
                 const LoadOptions& opts = {});
// The same with family_for_checkpoint(dir).
Model load_model(const kernels::Backend& be, const std::string& dir, const LoadOptions& opts = {});

}  // namespace mmrt::models
