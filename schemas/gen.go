// Package schemas holds Switchyard's wire types (protobuf, proto3).
//
// The Go code is generated from switchyard.proto by generate.sh (protoc
// plus the protoc-gen-go that go.mod pins); TestGeneratedCodeFresh fails
// when the committed code is stale.
package schemas

//go:generate ./generate.sh

// Version is the schema_version every message written by this build carries.
const Version = 1
