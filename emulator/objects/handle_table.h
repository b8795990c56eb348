// Handles name a client's objects; they are scoped to its connection.
#pragma once

#include <stdint.h>

#include <map>
#include <memory>

namespace uroce {

template <class T>
class HandleTable {
  public:
    std::shared_ptr<T> add(std::shared_ptr<T> object) {
        object->handle = next_++;
        objects_.emplace(object->handle, object);
        return object;
    }
    // Another handle to an object that already has one (an XRC_TGT QP that
    // ibv_open_qp opens): the object's own `handle` stays its first.
    uint32_t add_another(std::shared_ptr<T> object) {
        objects_.emplace(next_, std::move(object));
        return next_++;
    }
    std::shared_ptr<T> find(uint32_t handle) const {
        auto it = objects_.find(handle);
        return it == objects_.end() ? nullptr : it->second;
    }
    void erase(uint32_t handle) { objects_.erase(handle); }
    size_t size() const { return objects_.size(); }
    bool empty() const { return objects_.empty(); }
    // Most recently created first: the order in which to tear down.
    auto newest_first() const { return std::make_pair(objects_.rbegin(), objects_.rend()); }
    const std::map<uint32_t, std::shared_ptr<T>>& all() const { return objects_; }

  private:
    uint32_t next_ = 1;  // 0 means "no object" on the wire
    std::map<uint32_t, std::shared_ptr<T>> objects_;
};

}  // namespace uroce
