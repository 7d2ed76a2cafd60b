// Creates the compute device a runtime runs on, by name: `cpu`, `cuda`, or `auto` (cuda when it
// is usable here, else cpu). The binding and the standalone test program both go through it, so
// "why can't I use cuda" has one answer with one error code.
#pragma once

#include <memory>
#include <string>

#include "kernels/kernels.h"
#include "runtime/status.h"

namespace loom {

// Devices compiled into this build, comma-separated: "cpu" or "cpu,cuda".
const char* compiled_devices();

// Ok when `cuda` can be created here; otherwise `cuda_unavailable` naming the cause (not compiled
// in, no driver, no GPU, no kernel image for this GPU) and its fix.
Status cuda_usable();

// `name` is cpu | cuda | auto; `threads` sizes the cpu device's pool (ignored by cuda). On success
// *out holds the device; its name() says which one `auto` chose.
Status create_device(const std::string& name, int threads, std::unique_ptr<Device>* out);

}  // namespace loom
