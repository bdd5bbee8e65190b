// Package docs holds shellbox's documentation (Markdown). Its tests keep
// the documentation true where a machine can tell: every relative link of
// the README and of docs/*.md leads to a file (and heading) that exists, the
// README's test command is CI's, and docs/configuration.md documents
// exactly the keys package config has.
package docs
