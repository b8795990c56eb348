"""pyverbs' enumerations as flat namespaces, whichever rdma-core is
installed: `e` for libibverbs (`e.IBV_QPT_RC`), `ce` for librdmacm
(`ce.RDMA_PS_TCP`). Up to v64 pyverbs has them as module constants in
`pyverbs.enums` and `pyverbs.cm_enums`; v65 moved them into enum classes of
`pyverbs.libibverbs_enums` and `pyverbs.librdmacm_enums`
(`ibv_access_flags.IBV_ACCESS_LOCAL_WRITE`). The pyverbs scripts and the
labs take them from checks.py and labkit.py."""

import enum
import importlib
import types


def _flat(old, new):
    try:
        return importlib.import_module(old)
    except ImportError:
        names = {}
        for name, value in vars(importlib.import_module(new)).items():
            if isinstance(value, type) and issubclass(value, enum.Enum):
                names.update({member.name: member for member in value})
            elif name.lstrip("_").isupper():
                names[name] = value
        return types.SimpleNamespace(**names)


e = _flat("pyverbs.enums", "pyverbs.libibverbs_enums")
ce = _flat("pyverbs.cm_enums", "pyverbs.librdmacm_enums")
