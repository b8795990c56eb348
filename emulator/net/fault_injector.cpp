#include "net/fault_injector.h"

#include <sstream>

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

size_t FaultInjector::ScheduledHash::operator()(const Scheduled& s) const {
    return mix(key_of(s.packet) ^ s.attempt);
}

std::string FaultInjector::text() const {
    if (!schedule_.empty()) {
        return "replaying " + std::to_string(schedule_.size()) + " decisions";
    }
    std::ostringstream out;
    out << "drop " << settings_.drop << " duplicate " << settings_.duplicate << " reorder "
        << settings_.reorder << " delay " << settings_.delay.count() << "us";
    if (settings_.seed) {
        out << " seed " << *settings_.seed;
    }
    return out.str();
}

void FaultInjector::configure(const FaultSettings& settings) {
    settings_ = settings;
    attempts_.clear();
    schedule_.clear();
    log_.settings(settings_, 0);
}

std::optional<size_t> FaultInjector::replay(const std::vector<ScheduledFault>& schedule) {
    decltype(schedule_) replayed;
    for (size_t i = 0; i < schedule.size() && i < kMaxScheduled; ++i) {
        const ScheduledFault& fault = schedule[i];
        if (!replayed.emplace(Scheduled{fault.packet, fault.attempt}, fault.verdict).second) {
            return i;
        }
    }
    settings_ = {};
    attempts_.clear();
    schedule_ = std::move(replayed);
    log_.settings(settings_, schedule_.size());
    return std::nullopt;
}

void FaultInjector::record_to(UniqueFd file) {
    log_.open(std::move(file));
    log_.settings(settings_, schedule_.size());
}

FaultVerdict FaultInjector::decide(const PacketIdentity& packet) {
    if (!wants_identity()) {
        return decide();
    }
    const uint64_t key = key_of(packet);
    if (attempts_.size() == kRemembered && !attempts_.count(key)) {
        attempts_.clear();
    }
    const uint32_t attempt = attempts_[key]++;
    FaultVerdict fate;
    if (!schedule_.empty()) {
        if (auto it = schedule_.find({packet, attempt}); it != schedule_.end()) {
            fate = it->second;
        }
    } else if (settings_.seed) {
        uint64_t state = mix(*settings_.seed ^ mix(key ^ attempt));
        fate = verdict([&state](double probability) {
            state = mix(state);
            // The top 53 bits as a fraction in [0, 1).
            return probability > 0 && static_cast<double>(state >> 11) * 0x1.0p-53 < probability;
        });
    } else {
        fate = decide();
    }
    if (fate.acts()) {
        log_.decision(packet, attempt, fate);
    }
    return fate;
}

}  // namespace uroce
