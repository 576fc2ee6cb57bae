package main

import (
	"errors"
	"fmt"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// xdsPush is a DiscoveryResponse as xdsCodec reads it: its version, its
// nonce and its resources, whose bytes are the message's own, read
// once into one buffer and never copied again. Nothing else of the
// message is kept (its type, canary and control plane are not read).
type xdsPush struct {
	version, nonce string
	resources      []xdsResource
}

// xdsResource is one resource of a push (an Any): its type and its
// message's bytes.
type xdsResource struct {
	typeURL string
	value   []byte
}

// xdsCodec is the ADS stream's codec: requests are marshaled as gRPC's
// proto codec marshals them; a response is read into an xdsPush, where
// gRPC's would copy it twice more (once whole, and each resource's
// bytes again into its Any).
type xdsCodec struct{}

// Name is the proto codec's, so that the stream's content type is
// application/grpc+proto, as any ADS server expects.
func (xdsCodec) Name() string { return "proto" }

func (xdsCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (xdsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*xdsPush)
	if !ok {
		return fmt.Errorf("the xDS stream's codec reads an xdsPush, not %T", v)
	}
	return p.read(data.Materialize())
}

// errPushBytes is the error of a DiscoveryResponse whose bytes do not
// parse.
var errPushBytes = errors.New("the push's bytes do not parse as a DiscoveryResponse")

// read reads a DiscoveryResponse's bytes, which the push's resources
// then share: version_info (1), resources (2), nonce (5); the others are
// skipped. The version and the nonce are copied, so that they hold none
// of b once the push is dropped.
func (p *xdsPush) read(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errPushBytes
		}
		b = b[n:]
		if typ != protowire.BytesType || num != 1 && num != 2 && num != 5 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errPushBytes
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errPushBytes
		}
		b = b[n:]
		switch num {
		case 1:
			p.version = string(v)
		case 5:
			p.nonce = string(v)
		case 2:
			r, err := readAny(v)
			if err != nil {
				return err
			}
			p.resources = append(p.resources, r)
		}
	}
	return nil
}

// readAny reads an Any's bytes: type_url (1) and value (2).
func readAny(b []byte) (xdsResource, error) {
	var r xdsResource
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, errPushBytes
		}
		b = b[n:]
		if typ != protowire.BytesType || num > 2 {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return r, errPushBytes
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return r, errPushBytes
		}
		b = b[n:]
		if num == 1 {
			// Most pushes' resources share one type: its text is kept
			// once, not once a resource.
			if r.typeURL = resourcev3.RateLimitConfigType; string(v) != r.typeURL {
				r.typeURL = string(v)
			}
		} else {
			r.value = v
		}
	}
	return r, nil
}
