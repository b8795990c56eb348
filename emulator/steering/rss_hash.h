// Receive-side scaling: the Toeplitz hash (as the Microsoft RSS
// specification defines it) over the fields an RSS QP chose.
#pragma once

#include <stdint.h>

#include <span>
#include <vector>

#include "steering/frame.h"

namespace uroce::steering {

// Key bytes past the end count as 0.
uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input);

// The bytes hashed for IBV_RX_HASH_* `fields`: source address, destination
// address, source port, destination port, each in network order and only
// when selected and present in the frame.
std::vector<uint8_t> rss_hash_input(const FrameFields& frame, uint64_t fields);

}  // namespace uroce::steering
