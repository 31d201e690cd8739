# gdb pretty-printers for tapegrad: `p t`, `p grad_output`, `p n` show shapes and values.
#
#   tg::Tensor      Tensor "fc1.weight" [2, 2] requires_grad = [[0.5, -0.4], [0.3, 0.8]], grad None
#   tg::Array       Array [1, 2] = [[-2.30432, 1.61303]]     (any xt::xarray / xt::xtensor of numbers)
#   tg::Grad        Grad dense [2] = [...], Grad sparse rows {1, 3} of 6 x 3 = [[...], [...]], Grad None
#   tg::SparseRows  rows {1, 3} of 6 x 3 = [[...], [...]]
#   tg::Node        Node [1] tanh(x [1, 2]*) -> [1, 2]
#
# The build writes a copy next to the library (libtapegrad.so-gdb.py), which gdb
# loads with the library once the directory is trusted
# (gdb -iex 'add-auto-load-safe-path BUILD_DIR'); `meson install` puts one in
# <datadir>/gdb/auto-load/<libdir>/. Or load it by hand: (gdb) source this file.
# Values are read straight from memory: nothing in the program is called, so it
# works on a core file and where gdb cannot call functions.
import re
import struct

import gdb
import gdb.printing

SHOWN = 64  # a tensor with more values shows its first 8 and its count


def _shape_of(container):
    """The shape of an xtensor container (xarray: an svector; xtensor: a std::array)."""
    shape = container["m_shape"]
    fields = [f.name for f in shape.type.strip_typedefs().fields()]
    if "m_begin" in fields:  # xt::svector
        begin, end = shape["m_begin"], shape["m_end"]
        return [int((begin + i).dereference()) for i in range(int(end - begin))]
    elems = shape["_M_elems"]  # std::array
    n = elems.type.strip_typedefs().range()[1] + 1
    return [int(elems[i]) for i in range(n)]


def _values_of(container, count):
    """The first `count` values of an xtensor container, as Python numbers."""
    storage = container["m_storage"]
    begin = storage["p_begin"]
    elem = begin.type.target().strip_typedefs()
    size = elem.sizeof
    kind = {("float", 4): "f", ("double", 8): "d", ("long", 8): "q", ("int", 4): "i",
            ("unsigned long", 8): "Q"}.get((elem.name, size))
    if kind is None or count == 0:
        return [float(begin[i]) for i in range(count)]
    data = gdb.selected_inferior().read_memory(int(begin), count * size)
    return list(struct.unpack("<%d%s" % (count, kind), bytes(data)))


def _num(x):
    return "%g" % x if isinstance(x, float) else str(x)


def _nested(values, shape):
    """[[1, 2], [3, 4]] from flat values and a shape."""
    if not shape:
        return _num(values[0])
    if len(shape) == 1:
        return "[" + ", ".join(_num(v) for v in values) + "]"
    step = len(values) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nested(values[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


def shape_str(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def array_str(container):
    """'[2, 3] = [[...], [...]]', or the first 8 values of a large one."""
    shape = _shape_of(container)
    n = 1
    for d in shape:
        n *= d
    if n and not int(container["m_storage"]["p_begin"]):
        return shape_str(shape) + " (moved from: no values)"
    if n <= SHOWN:
        return shape_str(shape) + " = " + _nested(_values_of(container, n), shape)
    first = _values_of(container, 8)
    return shape_str(shape) + " (%d values) = [%s, ...]" % (n, ", ".join(_num(v) for v in first))


def _variant(v):
    """The active alternative of a std::variant, or None when it holds std::monostate."""
    index = int(v["_M_index"])
    u = v["_M_u"]
    for _ in range(index):
        u = u["_M_rest"]
    first = u["_M_first"]
    alt = first.type.template_argument(0)
    if alt.strip_typedefs().name == "std::monostate":
        return None
    storage = first["_M_storage"]
    if storage.type.strip_typedefs() == alt.strip_typedefs():
        return storage
    return storage.address.cast(alt.pointer()).dereference()  # __aligned_membuf<T>


def sparse_str(s):
    rows_vec = s["rows"]
    begin, end = rows_vec["_M_impl"]["_M_start"], rows_vec["_M_impl"]["_M_finish"]
    rows = [int((begin + i).dereference()) for i in range(int(end - begin))]
    shown = ", ".join(str(r) for r in rows[:8]) + (", ..." if len(rows) > 8 else "")
    values = s["values"]
    cols = _shape_of(values)[1] if len(rows) else 0
    return "rows {%s} of %d x %d = %s" % (shown, int(s["num_rows"]), cols, array_str(values).split(" = ", 1)[1])


def grad_str(g):
    held = _variant(g["slot_"])
    if held is None:
        return "None"
    if held.type.strip_typedefs().name == "tg::SparseRows":
        return "sparse " + sparse_str(held)
    return "dense " + array_str(held)


def _str(v):
    """A std::string's text, read from memory (with or without libstdc++'s printers)."""
    return v["_M_dataplus"]["_M_p"].string(length=int(v["_M_string_length"]))


def _shared(ptr):
    """The object a std::shared_ptr points to, or None."""
    p = ptr["_M_ptr"]
    return p.dereference() if int(p) else None


def impl_str(impl):
    name = _str(impl["name"])
    text = "Tensor "
    if name:
        text += '"%s" ' % name
    text += array_str(impl["value"]).replace(" = ", " requires_grad = " if bool(impl["requires_grad"]) else " = ", 1)
    creator = _shared(impl["creator"])
    if creator is not None:
        text += ", grad_fn=<%s>" % _str(creator["op"])
    return text + ", grad " + grad_str(impl["grad"])


def node_str(n):
    inputs = n["inputs"]
    begin, end = inputs["_M_impl"]["_M_start"], inputs["_M_impl"]["_M_finish"]
    parts = []
    for i in range(int(end - begin)):
        inp = (begin + i).dereference()
        impl = _shared(inp["tensor"]["impl_"])
        name = _str(impl["name"]) if impl is not None else ""
        shape = _shape_of(impl["value"]) if impl is not None else []
        parts.append((name + " " if name else "") + shape_str(shape) + ("*" if bool(inp["needs_grad"]) else ""))
    shape = n["output_shape"]
    out = [int((shape["m_begin"] + i).dereference()) for i in range(int(shape["m_end"] - shape["m_begin"]))]
    group = _str(n["group"])
    return "Node [%d] %s(%s) -> %s%s" % (int(n["index"]), _str(n["op"]), ", ".join(parts),
                                        shape_str(out), " (in %s)" % group if group else "")


class _Printer:
    def __init__(self, val, show):
        self.val, self.show = val, show

    def to_string(self):
        try:
            return self.show(self.val)
        except (gdb.error, gdb.MemoryError, RuntimeError) as e:  # a half-built or freed object
            return "<tapegrad printer: %s>" % e


def build():
    pp = gdb.printing.RegexpCollectionPrettyPrinter("tapegrad")
    pp.add_printer("Tensor", "^tg::Tensor$",
                   lambda v: _Printer(v, lambda t: impl_str(_shared(t["impl_"])) if _shared(t["impl_"]) is not None
                                      else "Tensor (empty handle)"))
    pp.add_printer("TensorImpl", "^tg::TensorImpl$", lambda v: _Printer(v, impl_str))
    pp.add_printer("Grad", "^tg::Grad$", lambda v: _Printer(v, lambda g: "Grad " + grad_str(g)))
    pp.add_printer("SparseRows", "^tg::SparseRows$", lambda v: _Printer(v, sparse_str))
    pp.add_printer("Node", "^tg::Node$", lambda v: _Printer(v, node_str))
    pp.add_printer("Array", "^xt::(xarray_container|xtensor_container)<",
                   lambda v: _Printer(v, lambda a: "Array " + array_str(a)))
    return pp


gdb.printing.register_pretty_printer(gdb.current_objfile(), build(), replace=True)
