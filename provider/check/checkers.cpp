// The classes check mode applies through hooks (checker.h), one factory
// each, as a table.
#include "checker.h"

namespace uroce::check {

std::unique_ptr<Checker> make_stranded_completion();
std::unique_ptr<Checker> make_inline_beyond_asked();
std::unique_ptr<Checker> make_beyond_caps();
std::unique_ptr<Checker> make_completions_after_destroy();
std::unique_ptr<Checker> make_post_loop_in_error();
std::unique_ptr<Checker> make_mtu_above_active();
std::unique_ptr<Checker> make_fork_unsafe();
std::unique_ptr<Checker> make_null_argument();

std::vector<std::unique_ptr<Checker>> make_checkers() {
    constexpr std::unique_ptr<Checker> (*kFactories[])() = {
        make_stranded_completion, make_inline_beyond_asked,
        make_beyond_caps,         make_completions_after_destroy,
        make_post_loop_in_error,  make_mtu_above_active,
        make_fork_unsafe,         make_null_argument,
    };
    std::vector<std::unique_ptr<Checker>> checkers;
    for (auto* make : kFactories) {
        checkers.push_back(make());
    }
    return checkers;
}

}  // namespace uroce::check
