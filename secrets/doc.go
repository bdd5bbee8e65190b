// Package secrets keeps credentials on the server's side of the sandbox
// wall. A policy names a credential by reference (policies: Credential, a
// header Template with ${secret:NAME} references); this package resolves
// the references from the server's own sources (Store: a directory of one
// file per secret, and SHELLBOX_SECRET_* variables of the server's
// environment), derives the meaningless per-session placeholders a sandbox
// sees instead (Placeholder), and rewrites an HTTP request's header on its
// way out of the relay (Injector), only for the credential's hosts.
//
// What it guarantees: a resolved value lives in the server's memory only
// for the rewrite of one request's header; errors, String methods and log
// fields name secrets, never show them. Kubernetes Secrets are not a source
// yet: mount them as files into secrets.dir.
package secrets
