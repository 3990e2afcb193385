#!/usr/bin/env python3
"""Regenerate grpc_service.proto and model_config.proto from the tritonclient wheel.

Why: the tritonclient wheel ships Triton's protocol only as compiled descriptors
(`*_pb2.py`), not as .proto text. This script prints those descriptors back as
proto3 source so that build.rs can compile them with protox. Field names,
numbers, types, nesting and services are exact; Triton's doc comments are lost.

Usage: pip download --no-deps tritonclient && unzip it; then
    python3 regen_from_tritonclient.py <unzipped-dir> <out-dir> [version]
"""
import importlib
import sys

from google.protobuf import descriptor_pb2

HEADER = """// Copyright (c) 2018-2025, NVIDIA CORPORATION. All rights reserved.
//
// Redistribution and use in source and binary forms, with or without
// modification, are permitted provided that the following conditions
// are met:
//  * Redistributions of source code must retain the above copyright
//    notice, this list of conditions and the following disclaimer.
//  * Redistributions in binary form must reproduce the above copyright
//    notice, this list of conditions and the following disclaimer in the
//    documentation and/or other materials provided with the distribution.
//  * Neither the name of NVIDIA CORPORATION nor the names of its
//    contributors may be used to endorse or promote products derived
//    from this software without specific prior written permission.
//
// THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS ``AS IS'' AND ANY
// EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
// IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR
// PURPOSE ARE DISCLAIMED.  IN NO EVENT SHALL THE COPYRIGHT OWNER OR
// CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL,
// EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO,
// PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR
// PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY
// OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
// (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
// OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
//
// Triton Inference Server protocol: {name}
// Origin: tritonclient {version} wheel (PyPI), {module}; printed back from its
// compiled descriptor by regen_from_tritonclient.py (comments are not part of
// the descriptor and so are absent; see triton-inference-server/common,
// protobuf/{name}, for the documented source).
"""

T = descriptor_pb2.FieldDescriptorProto
SCALAR = {
    T.TYPE_DOUBLE: "double", T.TYPE_FLOAT: "float", T.TYPE_INT64: "int64",
    T.TYPE_UINT64: "uint64", T.TYPE_INT32: "int32", T.TYPE_FIXED64: "fixed64",
    T.TYPE_FIXED32: "fixed32", T.TYPE_BOOL: "bool", T.TYPE_STRING: "string",
    T.TYPE_BYTES: "bytes", T.TYPE_UINT32: "uint32", T.TYPE_SFIXED32: "sfixed32",
    T.TYPE_SFIXED64: "sfixed64", T.TYPE_SINT32: "sint32", T.TYPE_SINT64: "sint64",
}


def type_name(f):
    if f.type in (T.TYPE_MESSAGE, T.TYPE_ENUM):
        return f.type_name  # fully qualified with leading dot: always resolvable
    return SCALAR[f.type]


def emit_enum(e, ind, out):
    out.append(f"{ind}enum {e.name} {{")
    if e.options.allow_alias:
        out.append(f"{ind}  option allow_alias = true;")
    for v in e.value:
        out.append(f"{ind}  {v.name} = {v.number};")
    out.append(f"{ind}}}")


def emit_message(m, ind, out):
    out.append(f"{ind}message {m.name} {{")
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    for n in m.nested_type:
        if not n.options.map_entry:
            emit_message(n, ind + "  ", out)
    for e in m.enum_type:
        emit_enum(e, ind + "  ", out)
    real_oneofs = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            real_oneofs.setdefault(f.oneof_index, []).append(f)
    done_oneofs = set()
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            idx = f.oneof_index
            if idx in done_oneofs:
                continue
            done_oneofs.add(idx)
            out.append(f"{ind}  oneof {m.oneof_decl[idx].name} {{")
            for g in real_oneofs[idx]:
                out.append(f"{ind}    {type_name(g)} {g.name} = {g.number};")
            out.append(f"{ind}  }}")
            continue
        entry = f.type_name.rsplit(".", 1)[-1]
        if f.label == T.LABEL_REPEATED and f.type == T.TYPE_MESSAGE and entry in maps:
            k, v = maps[entry].field[0], maps[entry].field[1]
            out.append(f"{ind}  map<{type_name(k)}, {type_name(v)}> {f.name} = {f.number};")
            continue
        label = "repeated " if f.label == T.LABEL_REPEATED else ("optional " if f.proto3_optional else "")
        out.append(f"{ind}  {label}{type_name(f)} {f.name} = {f.number};")
    out.append(f"{ind}}}")


def emit_file(fd, version, module):
    out = [HEADER.format(name=fd.name, version=version, module=module)]
    out.append(f'syntax = "{fd.syntax or "proto2"}";\n')
    out.append(f"package {fd.package};\n")
    for dep in fd.dependency:
        out.append(f'import "{dep}";')
    if fd.dependency:
        out.append("")
    for e in fd.enum_type:
        emit_enum(e, "", out)
        out.append("")
    for m in fd.message_type:
        emit_message(m, "", out)
        out.append("")
    for s in fd.service:
        out.append(f"service {s.name} {{")
        for r in s.method:
            cs = "stream " if r.client_streaming else ""
            ss = "stream " if r.server_streaming else ""
            out.append(f"  rpc {r.name}({cs}{r.input_type}) returns ({ss}{r.output_type}) {{}}")
        out.append("}")
    return "\n".join(out) + "\n"


def main():
    src, dst = sys.argv[1], sys.argv[2]
    sys.path.insert(0, src)
    import tritonclient  # noqa: F401  (the package must import for its submodules)
    version = sys.argv[3] if len(sys.argv) > 3 else getattr(tritonclient, "__version__", "unknown")
    for module in ("tritonclient.grpc.model_config_pb2", "tritonclient.grpc.service_pb2"):
        mod = importlib.import_module(module)
        fd = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fd)
        with open(f"{dst}/{fd.name}", "w") as fh:
            fh.write(emit_file(fd, version, module))


if __name__ == "__main__":
    main()
