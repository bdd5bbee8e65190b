package tools

import (
	"encoding/json"
)

// Tool names.
const (
	ToolBash       = "bash"
	ToolBashOutput = "bash_output"
	ToolBashKill   = "bash_kill"
	ToolPwsh       = "pwsh"
)

// Definition is one tool as a model sees it. It marshals as an MCP tool
// (name, description, inputSchema); Function gives the OpenAI-style function
// definition of the same tool.
type Definition struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Function is the OpenAI-style function definition of d.
func (d Definition) Function() map[string]any {
	return map[string]any{
		"type": "function",
		"function": map[string]any{
			"name":        d.Name,
			"description": d.Description,
			"parameters":  d.InputSchema,
		},
	}
}

const bashDescription = `Run a shell command with bash -c (not a login shell) and return its output.

- No state is kept between calls: every call starts a fresh shell. Use workdir instead of cd, and pass variables inline.
- Output is stdout, then a [stderr] section. Long output is cut to its tail, and a marker gives a file with the full output that you can read or grep with this tool.
- Markers after the output: [timed out after Nms], [killed by signal: NAME], [exit code: N]. A non-zero exit is a result to react to, not a tool error.
- The command is killed, with everything it started, when its timeout expires. Anything it leaves running in the background is killed when it exits.`

const bashBackgroundDescription = `
- Use run_in_background for servers and long jobs: the call returns a task id at once; poll the task with bash_output and stop it with bash_kill. You are told when a task ends only with a later tool result, so poll.`

const pwshDescription = `Run a PowerShell command with pwsh -NoProfile -NonInteractive -Command and return its output. Write PowerShell, not bash: $env:NAME for variables.

- No state is kept between calls: use workdir instead of Set-Location.
- Output is stdout, then a [stderr] section. Long output is cut to its tail, and a marker gives a file with the full output.
- Markers after the output: [timed out after Nms], [killed by signal: NAME], [exit code: N]. Non-zero exits are reported as [exit code: N]; investigate failures before moving on.`

const pwshBackgroundDescription = `
- With run_in_background the call returns a task id at once; poll it with bash_output and stop it with bash_kill.`

const bashOutputDescription = `Read the output a background task produced since the previous bash_output call for it, followed by a status line: "status: running", "status: completed, exit code: N" or "status: killed". Poll while the task runs.`

const bashKillDescription = `Kill a background task started with run_in_background, and every process it started.`

// prop is one JSON Schema property.
type prop struct {
	Type        string         `json:"type"`
	Description string         `json:"description"`
	Items       map[string]any `json:"items,omitempty"`
}

type objectSchema struct {
	Type                 string       `json:"type"`
	Properties           orderedProps `json:"properties"`
	Required             []string     `json:"required"`
	AdditionalProperties bool         `json:"additionalProperties"`
}

// orderedProps marshals properties in declaration order, so schemas (and the
// token prefix a model's KV cache reuses) are byte-stable.
type orderedProps []struct {
	name string
	p    prop
}

func (o orderedProps) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	for i, e := range o {
		if i > 0 {
			buf = append(buf, ',')
		}
		k, err := json.Marshal(e.name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(e.p)
		if err != nil {
			return nil, err
		}
		buf = append(append(append(buf, k...), ':'), v...)
	}
	return append(buf, '}'), nil
}

func (o *orderedProps) add(name string, p prop) {
	*o = append(*o, struct {
		name string
		p    prop
	}{name, p})
}

func shellDescription(tool string, background bool) string {
	d, bg := bashDescription, bashBackgroundDescription
	if tool == ToolPwsh {
		d, bg = pwshDescription, pwshBackgroundDescription
	}
	if background {
		return d + bg
	}
	return d
}

func shellSchema(sandbox, background bool) json.RawMessage {
	var props orderedProps
	props.add("command", prop{Type: "string", Description: "The command to run."})
	props.add("description", prop{Type: "string", Description: "What the command does, in 5-10 words of active voice (shown in the UI and logs only)."})
	props.add("timeoutMs", prop{Type: "number", Description: "Timeout in milliseconds. The deployment applies its default when absent and caps larger values."})
	props.add("workdir", prop{Type: "string", Description: "Working directory for this call. Defaults to the session directory; relative paths resolve against it."})
	if background {
		props.add("run_in_background", prop{Type: "boolean", Description: "Start the command as a background task and return its task id at once. No timeout applies."})
	}
	if sandbox {
		props.add("sandbox_permissions", prop{Type: "array", Items: map[string]any{"type": "string"}, Description: "Extra sandbox rights for this call only, e.g. \"network\". Requires justification."})
		props.add("justification", prop{Type: "string", Description: "Why this call needs the extra sandbox rights; shown to the approver."})
	}
	return mustSchema(props, "command", "description")
}

func taskSchema() json.RawMessage {
	var props orderedProps
	props.add("task_id", prop{Type: "string", Description: "The task id returned when the background task started."})
	return mustSchema(props, "task_id")
}

func mustSchema(props orderedProps, required ...string) json.RawMessage {
	b, err := json.Marshal(objectSchema{Type: "object", Properties: props, Required: required, AdditionalProperties: false})
	if err != nil {
		// Marshalling fixed, well-typed data cannot fail.
		panic("tools: schema: " + err.Error())
	}
	return b
}
