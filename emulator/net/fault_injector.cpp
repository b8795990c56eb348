#include "net/fault_injector.h"

namespace uroce {
namespace {

// SplitMix64's step: a well-mixed 64-bit value from any input.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t key_of(const PacketIdentity& p) {
    uint64_t h = mix(p.src_qpn);
    h = mix(h ^ p.dest_qpn);
    h = mix(h ^ (uint64_t{p.opcode} << 32 | p.psn_offset));
    return mix(h ^ p.mad_tid);
}

}  // namespace

template <class Draw>
FaultVerdict FaultInjector::verdict(Draw&& chance) const {
    FaultVerdict verdict;
    if (chance(settings_.drop)) {
        verdict.drop = true;
        return verdict;
    }
    verdict.copies = chance(settings_.duplicate) ? 2 : 1;
    verdict.delay =
        settings_.delay + (chance(settings_.reorder) ? kReorderHold : std::chrono::microseconds(0));
    return verdict;
}

FaultVerdict FaultInjector::decide() {
    return verdict([this](double probability) { return this->chance(probability); });
}

FaultVerdict FaultInjector::decide(const PacketIdentity& packet) {
    if (!settings_.seed) {
        return decide();
    }
    const uint64_t key = key_of(packet);
    if (attempts_.size() == kRemembered && !attempts_.count(key)) {
        attempts_.clear();
    }
    uint64_t state = mix(*settings_.seed ^ mix(key ^ attempts_[key]++));
    return verdict([&state](double probability) {
        state = mix(state);
        // The top 53 bits as a fraction in [0, 1).
        return probability > 0 && static_cast<double>(state >> 11) * 0x1.0p-53 < probability;
    });
}

}  // namespace uroce
