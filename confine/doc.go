// Package confine holds the pure rules of what a sandbox may be given,
// each defined once: the syntax of tenant and session ids, the runtimes,
// the memory floor and the default resources, the paths shellbox and the
// engine own inside every sandbox and so the targets a host directory may
// be mounted on, the egress allowlist's entries and matching, the HTTP
// rules judged per destination and the one normal form of the paths they
// judge (httprules.go), and the name of the permission that opens the
// network.
//
// Two layers check these rules. sandbox checks a Spec when it is built;
// policies checks a tenant's file when it loads, so a bad file fails with
// its file:line and never reaches a session. policies yields plain
// settings, which the session layer maps onto a sandbox spec, and must not
// import sandbox: so the rules live here, in a leaf that imports only the
// standard library and that both import. (Injecting sandbox's checks into
// the policy loader would also keep one definition, but every caller of
// the loader would have to pass them, and a policy loaded without them
// would be checked less.)
//
// Errors are plain: they say what is wrong with the value, and each caller
// adds its context and error class (sandbox wraps them in ErrInvalid).
package confine
