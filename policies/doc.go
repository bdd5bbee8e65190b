// Package policies will fill the permissions seam (tools.Gate): per-tenant
// YAML policy files that decide, for every bash and pwsh call, allow / ask /
// deny from ordered rules matched against the parsed command, grant or refuse
// sandbox_permissions escalations, and set the tenant's sandbox settings and
// limits. Decisions are audited. Rules are a guardrail and an approval flow;
// the sandbox is the security boundary.
//
// Until it lands, a Toolset without a Gate allows every call.
package policies
