// Package clientip finds the client of a request from the address of the
// connection's peer and, behind trusted proxies, the proxy header: the
// logic httplimit and grpclimit share.
//
// The client is the peer's address unless the peer is a trusted proxy;
// then it is the right-most address of the proxy header that is not
// itself trusted, read from the right and no further than MaxHeader
// bytes, so that a client that pads the header it sends changes nothing.
// A header that is malformed where it is read is not believed, and a
// peer address that cannot be read keys InvalidRemote. IPv6 clients are
// grouped by a prefix, and a NAT64 address keys the IPv4 client it
// carries: no input lets a client choose its key.
package clientip
