#pragma once
// inferkit version (kept equal to the CMake project version).

#define INFERKIT_VERSION_MAJOR 0
#define INFERKIT_VERSION_MINOR 3
#define INFERKIT_VERSION_PATCH 0
#define INFERKIT_VERSION_STRING "0.3.0"

namespace inferkit {
inline constexpr int kVersionMajor = INFERKIT_VERSION_MAJOR;
inline constexpr int kVersionMinor = INFERKIT_VERSION_MINOR;
inline constexpr int kVersionPatch = INFERKIT_VERSION_PATCH;
inline constexpr const char* kVersionString = INFERKIT_VERSION_STRING;
}  // namespace inferkit
