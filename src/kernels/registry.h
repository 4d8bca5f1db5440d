// The backends this build has, in one table (as models/registry.h is for model families): each
// entry names its device kind, finds the devices of that kind present now, and makes a backend
// for one of them. Adding a backend is its folder under src/kernels/, one line in registry.cpp
// and its build lines (docs/ARCHITECTURE.md, "Adding a device").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace mmrt::kernels {

// One device found by a backend's discovery.
struct DeviceInfo {
  Device device;
  std::string name;           // "x86-64 CPU (avx512bf16)", "NVIDIA H200"
  uint64_t memory_bytes = 0;  // device memory (the CPU: physical memory; 0 unknown)
  std::string detail;         // "2 cores", "compute 9.0, 132 SMs"
};

struct DeviceDiscovery {
  std::vector<DeviceInfo> devices;
  std::string none_because;  // why `devices` is empty ("no CUDA driver on this machine")
};

struct BackendEntry {
  DeviceKind kind;
  DeviceDiscovery (*discover)();
  // Makes the backend for `device` (present: discover() listed it).
  std::unique_ptr<Backend> (*create)(Device device, const BackendOptions& opts);
};

// This build's backends, the CPU first.
std::span<const BackendEntry> backend_entries();

// The backend for `device`. FailedPrecondition when this build has no backend of its kind or
// no such device is present, naming what the build has and what it sees.
std::unique_ptr<Backend> create_backend(Device device, const BackendOptions& opts = {});

// Why `device` cannot be made here ("this build has no cuda backend ...", "not present (no CUDA
// driver ...)"), or "" when it can.
std::string device_unavailable(Device device);

// Every device every backend of this build sees now.
std::vector<DeviceInfo> discover_devices();
// One line: "backends in this build: cpu, cuda; devices present: cpu (2 cores); cuda: none (no
// CUDA driver)".
std::string describe_backends();

}  // namespace mmrt::kernels
