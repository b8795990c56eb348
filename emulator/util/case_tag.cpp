#include "util/case_tag.h"

#include <deque>
#include <mutex>
#include <utility>

namespace uroce {
namespace {

// The kept maps, oldest first.
struct CaseMaps {
    std::mutex lock;
    std::deque<std::pair<std::string, std::shared_ptr<coverage::Counts>>> maps;

    // Under `lock`.
    std::shared_ptr<coverage::Counts> find(const std::string& id) const {
        for (const auto& [kept_id, map] : maps) {
            if (kept_id == id) {
                return map;
            }
        }
        return nullptr;
    }
};

CaseMaps& case_maps() {
    static CaseMaps kept;
    return kept;
}

}  // namespace

CaseRef no_case() {
    static const CaseRef none = std::make_shared<const CaseTag>();
    return none;
}

CaseRef tag_case(const std::string& id) {
    if (id.empty()) {
        return no_case();
    }
    auto tag = std::make_shared<CaseTag>();
    tag->id = id;
    CaseMaps& kept = case_maps();
    std::lock_guard lock(kept.lock);
    if ((tag->coverage = kept.find(id))) {
        return tag;
    }
    if (kept.maps.size() == kCaseMaps) {
        log_info(
            "coverage of case %s no longer kept: %zu cases' maps are (read a case's with "
            "uroce coverage --case ID)",
            kept.maps.front().first.c_str(), kCaseMaps);
        kept.maps.pop_front();
    }
    tag->coverage = std::make_shared<coverage::Counts>();
    kept.maps.emplace_back(id, tag->coverage);
    return tag;
}

std::shared_ptr<coverage::Counts> case_map(const std::string& id) {
    CaseMaps& kept = case_maps();
    std::lock_guard lock(kept.lock);
    return kept.find(id);
}

void forget_case_maps() {
    CaseMaps& kept = case_maps();
    std::lock_guard lock(kept.lock);
    kept.maps.clear();
}

}  // namespace uroce
