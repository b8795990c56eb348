// A FIFO whose slots are reused: an element leaves by T::recycle(), which
// resets it but keeps the memory its vectors hold, and the next element
// added takes a recycled slot. A send queue's WQEs pass through it at
// message rate without an allocation each (a std::deque of elements this
// large allocates a node per element). It grows by doubling and never
// shrinks; its owner bounds it (a QP's window by max_send_wr). Unlike a
// std::deque's, its elements move when it grows: a reference into it does
// not survive emplace_back() (Requester::take_work), only pop_front().
#pragma once

#include <cstddef>
#include <iterator>
#include <vector>

namespace uroce {

template <class T>
class SlotRing {
  public:
    bool empty() const { return count_ == 0; }
    size_t size() const { return count_; }
    T& operator[](size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    const T& operator[](size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    T& front() { return (*this)[0]; }
    T& back() { return (*this)[count_ - 1]; }

    // A recycled element at the back, to fill in.
    T& emplace_back() {
        if (count_ == slots_.size()) {
            grow();
        }
        ++count_;
        return back();
    }
    void pop_front() {
        front().recycle();
        head_ = (head_ + 1) & (slots_.size() - 1);
        --count_;
    }
    void clear() {
        while (!empty()) {
            pop_front();
        }
    }

    template <class Ring, class Value>
    struct Iterator {
        using iterator_category = std::forward_iterator_tag;
        using value_type = T;
        using difference_type = std::ptrdiff_t;
        using pointer = Value*;
        using reference = Value&;
        Ring* ring;
        size_t index;
        Value& operator*() const { return (*ring)[index]; }
        Value* operator->() const { return &(*ring)[index]; }
        Iterator& operator++() {
            ++index;
            return *this;
        }
        bool operator==(const Iterator& other) const { return index == other.index; }
    };
    using iterator = Iterator<SlotRing, T>;
    using const_iterator = Iterator<const SlotRing, const T>;
    iterator begin() { return {this, 0}; }
    iterator end() { return {this, count_}; }
    const_iterator begin() const { return {this, 0}; }
    const_iterator end() const { return {this, count_}; }

  private:
    void grow() {
        std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);
        for (size_t i = 0; i < count_; ++i) {
            bigger[i] = std::move((*this)[i]);
        }
        slots_ = std::move(bigger);
        head_ = 0;
    }

    std::vector<T> slots_;  // a power of two of them
    size_t head_ = 0;
    size_t count_ = 0;
};

}  // namespace uroce
