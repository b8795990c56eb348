// Address handles and XRC domains.
#include <stdlib.h>

#include "provider.h"

namespace uroce {

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    if (!attr) {
        refuse_null(pd->context, "ibv_create_ah", "attr");
        return nullptr;
    }

    rpc::CreateAhReply reply;
    if (int error = client_of(pd->context).call(rpc::CreateAhRequest{pd->handle, *attr}, &reply)) {
        report(pd->context, "create_ah", error);
        return nullptr;
    }
    auto* ah = static_cast<ibv_ah*>(calloc(1, sizeof(ibv_ah)));
    if (!ah) {
        client_of(pd->context).call_op(rpc::Op::kDestroyAh, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    *ah = {pd->context, pd, reply.handle};
    if (check::CheckState* check = checking(pd->context)) {
        check->created(ah, "AH");
    }
    return ah;
}

int destroy_ah(ibv_ah* ah) {
    if (int error =
            client_of(ah->context).call_op(rpc::Op::kDestroyAh, rpc::HandleRequest{ah->handle})) {
        return report(ah->context, "destroy_ah", error);
    }
    if (check::CheckState* check = checking(ah->context)) {
        check->destroyed(ah);
    }
    free(ah);
    return 0;
}

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
    if (!attr) {
        refuse_null(context, "ibv_open_xrcd", "attr");
        return nullptr;
    }

    const bool has_fd = (attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) && attr->fd != -1;
    rpc::OpenXrcdRequest request{attr->comp_mask, has_fd,
                                 (attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ? attr->oflags : 0};
    rpc::OpenXrcdReply reply;
    const int error = has_fd ? client_of(context).call(request, &reply, std::span(&attr->fd, 1))
                             : client_of(context).call(request, &reply);
    if (error) {
        report(context, "open_xrcd", error);
        return nullptr;
    }
    auto* xrcd = static_cast<verbs_xrcd*>(calloc(1, sizeof(verbs_xrcd)));
    if (!xrcd) {
        client_of(context).call_op(rpc::Op::kCloseXrcd, rpc::HandleRequest{reply.handle});
        errno = ENOMEM;
        return nullptr;
    }
    xrcd->xrcd.context = context;
    xrcd->comp_mask = VERBS_XRCD_HANDLE;
    xrcd->handle = reply.handle;
    return &xrcd->xrcd;
}

int close_xrcd(ibv_xrcd* ibxrcd) {
    auto* xrcd = reinterpret_cast<verbs_xrcd*>(ibxrcd);
    if (int error = client_of(ibxrcd->context)
                        .call_op(rpc::Op::kCloseXrcd, rpc::HandleRequest{xrcd->handle})) {
        return report(ibxrcd->context, "close_xrcd", error);
    }
    free(xrcd);
    return 0;
}

}  // namespace uroce
