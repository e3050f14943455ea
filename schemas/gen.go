// Package schemas holds Switchyard's wire types (protobuf, proto3).
//
// The Go code is generated from switchyard.proto by generate.sh (protoc
// plus the protoc-gen-go that go.mod pins), with switchyard.binpb, the
// descriptor set with comments; TestGeneratedCodeFresh fails when either
// is stale.
package schemas

//go:generate ./generate.sh

// Version is the schema_version every message written by this build
// carries. It goes up only for a breaking change of meaning (see the rules
// at the top of switchyard.proto and docs/schemas.md); additive changes
// keep it, and readers accept any version.
const Version = 1
