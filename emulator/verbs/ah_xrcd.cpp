// Address handles and XRC domains.
#include <fcntl.h>
#include <sys/stat.h>

#include "verbs/context.h"

namespace uroce {

// RoCE addresses are GIDs: an AH must carry a GRH whose source GID exists
// (`slot`: the GID table's slot it names).
Result Context::check_ah_attr(const ibv_ah_attr& attr, uint8_t& slot) const {
    if (attr.port_num < 1 || attr.port_num > Device::kPortCount) {
        return fail(EINVAL, "AH port %u does not exist", attr.port_num);
    }
    if (!attr.is_global) {
        return fail(EINVAL, "RoCE address handles need a GRH (is_global = 1)");
    }
    if (Result r = device_.check_source_gid(attr.grh.sgid_index, slot); !r) {
        return r;
    }
    // IBV_RATE_800_GBPS, 23: verbs.h names it from rdma-core v39.
    if (attr.static_rate > 23) {
        return fail(EINVAL, "static rate %d is not a rate", attr.static_rate);
    }
    return ok();
}

Result Context::create_ah(const rpc::CreateAhRequest& req, rpc::CreateAhReply& reply) {
    auto pd = pds_.find(req.pd);
    if (!pd) {
        return fail(EINVAL, "no PD with handle %u", req.pd);
    }
    uint8_t slot = 0;
    if (Result r = check_ah_attr(req.attr, slot); !r) {
        return r;
    }
    if (Result r = device_.admit(owner_, ObjectKind::kAh); !r) {
        return r;
    }
    auto ah = std::make_shared<Ah>();
    ah->pd = Ref<Pd>(pd);
    ah->attr = req.attr;
    ah->attr.grh.sgid_index = slot;  // the transport's
    reply.handle = ahs_.add(ah)->handle;
    device_.count(owner_, ObjectKind::kAh, 1);
    return ok();
}

Result Context::destroy_ah(const rpc::HandleRequest& req, rpc::Empty&) {
    if (!ahs_.find(req.handle)) {
        return fail(EINVAL, "no AH with handle %u", req.handle);
    }
    ahs_.erase(req.handle);
    device_.count(owner_, ObjectKind::kAh, -1);
    return ok();
}

// As ib_uverbs_open_xrcd(): a file names a domain shared by everyone who
// opens it; O_CREAT makes one when none exists, O_EXCL insists on that.
Result Context::open_xrcd(const rpc::OpenXrcdRequest& req, rpc::OpenXrcdReply& reply,
                          UniqueFd file) {
    constexpr uint32_t kKnown = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if (req.comp_mask & ~kKnown) {
        return fail(EINVAL, "unknown XRCD comp_mask bits 0x%x", req.comp_mask & ~kKnown);
    }
    if (req.oflags & ~(O_CREAT | O_EXCL)) {
        return fail(EINVAL, "XRCD oflags 0x%x: only O_CREAT and O_EXCL are allowed", req.oflags);
    }
    if (Result r = device_.admit(owner_, ObjectKind::kXrcd); !r) {
        return r;
    }
    std::shared_ptr<XrcdDomain> domain;
    if (req.has_fd) {
        struct stat st;
        if (!file || fstat(file.get(), &st) != 0) {
            return fail(EBADF, "the XRCD file descriptor is not open");
        }
        auto& files = device_.xrcd_files();
        const auto key = std::make_pair(st.st_dev, st.st_ino);
        if (auto it = files.find(key); it != files.end()) {
            domain = it->second.lock();
        }
        if (domain && (req.oflags & O_EXCL)) {
            return fail(EINVAL, "an XRC domain already exists for that file (O_EXCL)");
        }
        if (!domain && !(req.oflags & O_CREAT)) {
            return fail(EAGAIN, "no XRC domain exists for that file and O_CREAT is not set");
        }
        if (!domain) {
            domain = std::make_shared<XrcdDomain>(XrcdDomain{st.st_dev, st.st_ino, true});
            files[key] = domain;
        }
    } else {
        domain = std::make_shared<XrcdDomain>();
    }
    auto xrcd = std::make_shared<Xrcd>();
    xrcd->domain = domain;
    reply.handle = xrcds_.add(xrcd)->handle;
    device_.count(owner_, ObjectKind::kXrcd, 1);
    return ok();
}

Result Context::close_xrcd(const rpc::HandleRequest& req, rpc::Empty&) {
    auto xrcd = xrcds_.find(req.handle);
    if (!xrcd) {
        return fail(EINVAL, "no XRC domain with handle %u", req.handle);
    }
    if (xrcd->users) {
        return fail(EBUSY, "XRC domain %u is still used by %d SRQs or QPs", req.handle,
                    xrcd->users);
    }
    const XrcdDomain domain = *xrcd->domain;
    xrcds_.erase(req.handle);
    device_.count(owner_, ObjectKind::kXrcd, -1);
    auto& files = device_.xrcd_files();
    if (auto it = files.find({domain.file_dev, domain.file_ino});
        domain.has_file && it != files.end() && it->second.expired()) {
        files.erase(it);
    }
    return ok();
}

}  // namespace uroce
