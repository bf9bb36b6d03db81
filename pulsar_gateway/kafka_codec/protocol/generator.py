"""Write messages.py, the construct definitions of Kafka's requests and responses, from its specs.

Kafka keeps its protocol as JSON files (with // comments), one per request and response, each
listing fields with the versions they appear in, nullable and tagged versions and defaults. This
script resolves every valid version of every API a broker serves into one flat construct
definition per (api key, version), written in the vocabulary of ``__init__.py``. Nobody types a
field list: a new Kafka version costs a regeneration.

    python -m pulsar_gateway.kafka_codec.protocol.generator [SPEC_DIR] [-o OUTPUT]

SPEC_DIR defaults to ``../shared/kafka-protocol`` beside the checkout: Apache Kafka's own
definitions (clients/src/main/resources/common/message), which every development and CI
machine has there and which the project does not carry. messages.py is committed, so nothing
at run time needs the specs; ``tests/unit/test_kafka_protocol.py`` fails when messages.py
differs from what this script writes (and says so plainly when the specs are absent).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar_gateway.kafka_codec.protocol import spec_amendments

DEFAULT_SPEC_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "kafka-protocol"
DEFAULT_OUTPUT = Path(__file__).with_name("messages.py")
LISTENER = "broker"  # the APIs a broker answers; controller-only RPCs are left out

FIXED_TYPES = {
    "bool": "Bool",
    "int8": "Int8",
    "int16": "Int16",
    "uint16": "Uint16",
    "int32": "Int32",
    "uint32": "Uint32",
    "int64": "Int64",
    "float64": "Float64",
    "uuid": "Uuid",
}
VARIABLE_TYPES = {"string": "String", "bytes": "Bytes", "records": "Records"}
ZERO_VALUES: dict[str, Any] = {
    "bool": False,
    "float64": 0.0,
    "string": "",
    "bytes": b"",
    "records": b"",
}
VOCABULARY = (
    "Array Bool Bytes CompactArray CompactBytes CompactNullableArray CompactNullableBytes "
    "CompactNullableRecords CompactNullableString CompactRecords CompactString Float64 Int8 "
    "Int16 Int32 Int64 KafkaStruct NullableArray NullableBytes NullableRecords NullableString "
    "NullableStructField Records String Tagged Uint16 Uint32 Uuid"
).split()


class SpecError(Exception):
    """The specs say something this generator cannot express; fix the generator, not the file."""


@dataclass(frozen=True)
class Versions:
    """A version range from the specs: "3+", "1-4", "7" or "none"."""

    low: int
    high: int | None  # None: open-ended

    @classmethod
    def parse(cls, text: str) -> Versions:
        """Parse the specs' notation."""
        text = text.strip()
        if text == "none":
            return cls(0, -1)
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)

    def first(self) -> int | None:
        """The lowest version, None when empty."""
        return None if self.high is not None and self.high < self.low else self.low


def strip_comments(text: str) -> str:
    """Remove // comments outside string literals (the specs are JSON with comments)."""
    out = []
    i = 0
    in_string = False
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[i + 1])
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


def load_spec(path: Path) -> dict[str, Any]:
    """One spec file as a dict."""
    return json.loads(strip_comments(path.read_text(encoding="utf-8")))


def snake(name: str) -> str:
    """Field name to dict key: "TopicId" -> "topic_id", "KRaftVersion" -> "k_raft_version"."""
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def java_int(value: str | int) -> int:
    """A default as Java's Integer.decode reads it: decimal, 0x hex or 0-prefixed octal."""
    if isinstance(value, int):
        return value
    text = value.strip()
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if digits.lower().startswith("0x"):
        return sign * int(digits[2:], 16)
    if len(digits) > 1 and digits.startswith("0"):
        return sign * int(digits[1:], 8)
    return sign * int(digits)


class MessageRenderer:
    """Renders one spec file's messages, version by version."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.name = spec["name"]
        self.flexible = Versions.parse(spec["flexibleVersions"])
        self.structs = self._register_structs()

    def _register_structs(self) -> dict[str, list[list[dict[str, Any]]]]:
        """Struct bodies by type name: commonStructs and every inline definition."""
        structs: dict[str, list[list[dict[str, Any]]]] = {}
        for common in self.spec.get("commonStructs", []):
            structs.setdefault(common["name"], []).append(common["fields"])

        def walk(fields: list[dict[str, Any]]) -> None:
            for field in fields:
                if "fields" in field:
                    structs.setdefault(field["type"].removeprefix("[]"), []).append(field["fields"])
                    walk(field["fields"])

        walk(self.spec.get("fields", []))
        for common in self.spec.get("commonStructs", []):
            walk(common["fields"])
        return structs

    def struct_fields(self, field: dict[str, Any]) -> list[dict[str, Any]]:
        """A struct field's members: inline, or a struct of that name elsewhere in the file."""
        if "fields" in field:
            return field["fields"]
        type_name = field["type"].removeprefix("[]")
        found = self.structs.get(type_name, [])
        if not found:
            raise SpecError(f"{self.name}: {field['name']} has unknown type {type_name}")
        if any(body != found[0] for body in found[1:]):
            raise SpecError(f"{self.name}: struct {type_name} is defined more than once")
        return found[0]

    def render(self, version: int) -> str:
        """The definition of this message in one version."""
        return self.render_struct(self.spec["fields"], version, 0)

    def render_struct(self, fields: list[dict[str, Any]], version: int, depth: int) -> str:
        """A KafkaStruct with the fields present in ``version``."""
        flexible = version in self.flexible
        pad = "    " * (depth + 1)
        lines = [
            f"{pad}{self.render_member(field, version, depth + 1)},\n"
            for field in fields
            if version in Versions.parse(field["versions"])
        ]
        if flexible:
            lines.append(f"{pad}flexible=True,\n")
        if not lines:
            return "KafkaStruct()"
        return "KafkaStruct(\n" + "".join(lines) + "    " * depth + ")"

    def render_member(self, field: dict[str, Any], version: int, depth: int) -> str:
        """``"name" / type``, with construct's Default for a spec default, or Tagged(...)."""
        key = snake(field["name"])
        tagged = "tag" in field and version in Versions.parse(field.get("taggedVersions", "none"))
        nullable = version in Versions.parse(field.get("nullableVersions", "none"))
        if "flexibleVersions" in field:
            compact = version in Versions.parse(field["flexibleVersions"])
        else:
            compact = version in self.flexible
        if tagged and not compact:
            raise SpecError(f"{self.name}: tagged field {field['name']} in a non-flexible version")
        rendered = self.render_type(field, version, depth, compact, nullable, tagged)
        if tagged:  # written only when the caller sets it, so a default would never apply
            return f"Tagged({field['tag']}, {key!r} / {rendered})"
        default = self.default(field, nullable)
        if default is not None:
            rendered = f"Default({rendered}, {default!r})"
        return f"{key!r} / {rendered}"

    def render_type(
        self,
        field: dict[str, Any],
        version: int,
        depth: int,
        compact: bool,
        nullable: bool,
        tagged: bool,
    ) -> str:
        """The construct for a field's type in one version."""
        type_name = field["type"]
        if type_name.startswith("[]"):
            element = type_name[2:]
            if element in FIXED_TYPES:
                item = FIXED_TYPES[element]
            elif element in VARIABLE_TYPES:
                item = ("Compact" if compact else "") + VARIABLE_TYPES[element]
            else:
                item = self.render_struct(self.struct_fields(field), version, depth)
            kind = ("Compact" if compact else "") + ("Nullable" if nullable else "") + "Array"
            return f"{kind}({item})"
        if type_name in FIXED_TYPES:
            if nullable:
                raise SpecError(f"{self.name}: {field['name']} is a nullable {type_name}")
            return FIXED_TYPES[type_name]
        if type_name in VARIABLE_TYPES:
            prefix = ("Compact" if compact else "") + ("Nullable" if nullable else "")
            return prefix + VARIABLE_TYPES[type_name]
        body = self.render_struct(self.struct_fields(field), version, depth)
        if nullable:
            return f"NullableStructField({body}, tagged={tagged})"
        return body

    def default(self, field: dict[str, Any], nullable: bool) -> Any:
        """The spec default when it differs from the type's own, else None."""
        raw = field.get("default")
        if raw is None:
            return None
        type_name = field["type"]
        if raw == "null":
            return None  # the nullable types default to null already; others to their zero
        if nullable:
            raise SpecError(
                f"{self.name}: {field['name']} is nullable with non-null default {raw!r}; "
                "the codec encodes None (missing) as the default, so it cannot send null"
            )
        if type_name == "bool":
            value: Any = raw if isinstance(raw, bool) else {"true": True, "false": False}[raw]
        elif type_name.startswith("int") or type_name.startswith("uint"):
            value = java_int(raw)
        elif type_name == "float64":
            value = float(raw)
        elif type_name == "string":
            value = str(raw)
        else:
            raise SpecError(f"{self.name}: no default {raw!r} for a {type_name}")
        return None if value == ZERO_VALUES.get(type_name, 0) else value


def select_specs(spec_dir: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request, response) spec pairs of the APIs a broker serves, by api key."""
    pairs = []
    for path in sorted(spec_dir.glob("*Request.json")):
        request = load_spec(path)
        if request.get("type") != "request" or LISTENER not in request.get("listeners", []):
            continue
        response = load_spec(path.with_name(path.name.replace("Request.json", "Response.json")))
        spec_amendments.amend(request, response)
        if request["validVersions"] != response["validVersions"]:
            raise SpecError(f"{request['name']}: request and response versions differ")
        pairs.append((request, response))
    known = {request["apiKey"] for request, _ in pairs}
    pairs += [pair for pair in spec_amendments.added() if pair[0]["apiKey"] not in known]
    return sorted(pairs, key=lambda pair: pair[0]["apiKey"])


def first_flexible(spec: dict[str, Any]) -> int | None:
    """The first flexible version; the specs only ever say "N+" or "none"."""
    text = spec["flexibleVersions"]
    if text != "none" and not text.endswith("+"):
        raise SpecError(f"{spec['name']}: flexibleVersions {text!r} is not open-ended")
    return Versions.parse(text).first()


def render_definitions(spec: dict[str, Any], table: dict[Any, str], key: Any = None) -> list[str]:
    """``NameVn = KafkaStruct(...)`` for every version; identical versions share one object."""
    renderer = MessageRenderer(spec)
    versions = Versions.parse(spec["validVersions"])
    assert versions.high is not None, f"{spec['name']} has no highest version"
    lines: list[str] = []
    seen: dict[str, str] = {}
    for version in range(versions.low, versions.high + 1):
        name = f"{spec['name']}V{version}"
        text = renderer.render(version)
        if text in seen:
            lines.append(f"{name} = {seen[text]}\n")
        else:
            seen[text] = name
            lines.append(f"{name} = {text}\n")
        table[version if key is None else (key, version)] = name
    return lines


def render_api_keys(names: dict[int, str]) -> str:
    """The ApiKey enum: every API's key under its spec name in upper snake case."""
    members = "".join(f"    {snake(name).upper()} = {key}\n" for key, name in sorted(names.items()))
    return (
        "\n\nclass ApiKey(IntEnum):\n"
        '    """Kafka\'s API keys, named as the request specs name them."""\n\n'
        f"{members}\n\n"
    )


def render_table(name: str, annotation: str, entries: dict[Any, str]) -> str:
    """A dict literal whose values are source text."""
    body = "".join(f"    {key!r}: {value},\n" for key, value in entries.items())
    return f"{name}: {annotation} = {{\n{body}}}\n"


def generate(spec_dir: Path) -> str:
    """The full text of messages.py."""
    pairs = select_specs(spec_dir)
    out = [
        "# Generated by pulsar_gateway/kafka_codec/protocol/generator.py from Kafka's JSON\n",
        "# message definitions (kafka-protocol/*.json). DO NOT EDIT: edit the generator, run\n",
        "#     python -m pulsar_gateway.kafka_codec.protocol.generator\n",
        '"""Construct definitions of Kafka request and response bodies, per api key and version.',
        "\n\nGenerated; see generator.py. The building blocks are defined in vocabulary.py.\n",
        '"""\n\n',
        "from enum import IntEnum\n\n",
        "from construct import Default\n\n",
        "from .vocabulary import (\n" + "".join(f"    {name},\n" for name in VOCABULARY) + ")\n\n",
    ]
    names = {req["apiKey"]: req["name"].removesuffix("Request") for req, _ in pairs}
    out.append(render_api_keys(names))
    out.append(render_table("API_NAMES", "dict[int, str]", {k: repr(v) for k, v in names.items()}))
    supported = {}
    for request, _ in pairs:
        versions = Versions.parse(request["validVersions"])
        supported[request["apiKey"]] = repr((versions.low, versions.high))
    out.append(render_table("SUPPORTED", "dict[int, tuple[int, int]]", supported))
    unstable = ", ".join(str(req["apiKey"]) for req, _ in pairs if req.get("latestVersionUnstable"))
    out.append(
        "# APIs whose highest version above is still unstable in Kafka: do not advertise it.\n"
        f"LATEST_VERSION_UNSTABLE: frozenset[int] = frozenset({{{unstable}}})\n"
    )
    for side, index in (("REQUEST", 0), ("RESPONSE", 1)):
        flexible = {
            pair[0]["apiKey"]: repr(first_flexible(pair[index]))
            for pair in pairs
            if first_flexible(pair[index]) is not None
        }
        out.append("# The first flexible version, for APIs that have one.\n")
        out.append(render_table(f"{side}_FLEXIBLE_FROM", "dict[int, int]", flexible))

    headers: dict[str, dict[Any, str]] = {"REQUEST_HEADERS": {}, "RESPONSE_HEADERS": {}}
    out.append("\n# Headers (the codec reads request headers with struct; these pin it in tests)\n")
    for header, table in (
        ("RequestHeader", "REQUEST_HEADERS"),
        ("ResponseHeader", "RESPONSE_HEADERS"),
    ):
        out += render_definitions(load_spec(spec_dir / f"{header}.json"), headers[table])
    requests: dict[Any, str] = {}
    responses: dict[Any, str] = {}
    for request, response in pairs:
        out.append(f"\n# {names[request['apiKey']]} (api key {request['apiKey']})\n")
        out += render_definitions(request, requests, request["apiKey"])
        out += render_definitions(response, responses, request["apiKey"])
    out.append("\n")
    for table, entries in headers.items():
        out.append(render_table(table, "dict[int, KafkaStruct]", entries))
    out.append(render_table("REQUESTS", "dict[tuple[int, int], KafkaStruct]", requests))
    out.append(render_table("RESPONSES", "dict[tuple[int, int], KafkaStruct]", responses))
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec_dir", nargs="?", type=Path, default=DEFAULT_SPEC_DIR)
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    text = generate(args.spec_dir)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
