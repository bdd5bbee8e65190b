package pwsh

import (
	"strings"
	"unicode/utf8"
)

// PowerShell command names, as pwsh 7 on Linux resolves them.
//
// Source: PowerShell/PowerShell, src/System.Management.Automation/engine/
// InitialSessionState.cs (BuiltInAliases and BuiltInFunctions, the entries
// compiled in on UNIX: the `#if !UNIX` ones such as rm, ls, cp, mv, cat, ps,
// kill, sleep, sort, tee, diff, start and clear are Windows-only and name the
// native commands on Linux), and the AliasesToExport and CmdletsToExport of
// the manifests under src/Modules/Unix/ (gcb, gtz, scb, fhx).

// pwshAliases maps a built-in alias (folded) to the command it runs.
var pwshAliases = map[string]string{
	"foreach": "ForEach-Object", "%": "ForEach-Object", "where": "Where-Object", "?": "Where-Object",
	"clc": "Clear-Content", "cli": "Clear-Item", "clp": "Clear-ItemProperty", "clv": "Clear-Variable",
	"cpi": "Copy-Item", "cvpa": "Convert-Path", "dbp": "Disable-PSBreakpoint", "ebp": "Enable-PSBreakpoint",
	"epal": "Export-Alias", "epcsv": "Export-Csv", "fl": "Format-List", "ft": "Format-Table", "fw": "Format-Wide",
	"gal": "Get-Alias", "gbp": "Get-PSBreakpoint", "gc": "Get-Content", "gci": "Get-ChildItem",
	"gcm": "Get-Command", "gdr": "Get-PSDrive", "gcs": "Get-PSCallStack", "ghy": "Get-History",
	"gi": "Get-Item", "gl": "Get-Location", "gm": "Get-Member", "gmo": "Get-Module", "gp": "Get-ItemProperty",
	"gpv": "Get-ItemPropertyValue", "gps": "Get-Process", "group": "Group-Object", "gu": "Get-Unique",
	"gv": "Get-Variable", "iex": "Invoke-Expression", "ihy": "Invoke-History", "ii": "Invoke-Item",
	"ipmo": "Import-Module", "ipal": "Import-Alias", "ipcsv": "Import-Csv", "measure": "Measure-Object",
	"mi": "Move-Item", "mp": "Move-ItemProperty", "nal": "New-Alias", "ndr": "New-PSDrive", "ni": "New-Item",
	"nv": "New-Variable", "nmo": "New-Module", "oh": "Out-Host", "rbp": "Remove-PSBreakpoint",
	"rdr": "Remove-PSDrive", "ri": "Remove-Item", "rni": "Rename-Item", "rnp": "Rename-ItemProperty",
	"rp": "Remove-ItemProperty", "rmo": "Remove-Module", "rv": "Remove-Variable", "gerr": "Get-Error",
	"rvpa": "Resolve-Path", "sal": "Set-Alias", "sbp": "Set-PSBreakpoint", "select": "Select-Object",
	"si": "Set-Item", "sl": "Set-Location", "sp": "Set-ItemProperty", "saps": "Start-Process",
	"spps": "Stop-Process", "sv": "Set-Variable", "irm": "Invoke-RestMethod", "iwr": "Invoke-WebRequest",
	"cd": "Set-Location", "dir": "Get-ChildItem", "echo": "Write-Output", "fc": "Format-Custom",
	"pwd": "Get-Location", "type": "Get-Content", "h": "Get-History", "history": "Get-History",
	"md": "mkdir", "popd": "Pop-Location", "pushd": "Push-Location", "r": "Invoke-History",
	"cls": "Clear-Host", "chdir": "Set-Location", "copy": "Copy-Item", "del": "Remove-Item",
	"erase": "Remove-Item", "move": "Move-Item", "rd": "Remove-Item", "ren": "Rename-Item",
	"set": "Set-Variable", "icm": "Invoke-Command", "clhy": "Clear-History", "gjb": "Get-Job",
	"rcjb": "Receive-Job", "rjb": "Remove-Job", "sajb": "Start-Job", "spjb": "Stop-Job", "wjb": "Wait-Job",
	"nsn": "New-PSSession", "gsn": "Get-PSSession", "rsn": "Remove-PSSession", "etsn": "Enter-PSSession",
	"rcsn": "Receive-PSSession", "exsn": "Exit-PSSession", "sls": "Select-String",
	// Exported by the Unix module manifests.
	"gcb": "Get-Clipboard", "scb": "Set-Clipboard", "gtz": "Get-TimeZone", "fhx": "Format-Hex",
	// Built-in functions (BuiltInFunctions) that only call a cmdlet: exec
	// is `Switch-Process -WithCommand $args` on UNIX.
	"exec": "Switch-Process", "cd..": "Set-Location", "cd~": "Set-Location", `cd\`: "Set-Location",
	"help": "Get-Help", "oss": "Out-String", "pause": "Read-Host",
}

// pwshGetCmdlets are the Get- cmdlets of pwsh on Linux. A command name that
// nothing resolves runs Get-<name> if that exists (`content x` is
// Get-Content x), so a rule naming one of these also sees the short form.
var pwshGetCmdlets = []string{
	"Get-Alias", "Get-ChildItem", "Get-Clipboard", "Get-CmsMessage", "Get-Command", "Get-Content",
	"Get-Credential", "Get-Culture", "Get-Date", "Get-Error", "Get-Event", "Get-EventSubscriber",
	"Get-ExecutionPolicy", "Get-ExperimentalFeature", "Get-FileHash", "Get-FormatData", "Get-Help",
	"Get-History", "Get-Host", "Get-Item", "Get-ItemProperty", "Get-ItemPropertyValue", "Get-Job",
	"Get-Location", "Get-MarkdownOption", "Get-Member", "Get-Module", "Get-PfxCertificate", "Get-Process",
	"Get-PSBreakpoint", "Get-PSCallStack", "Get-PSDrive", "Get-PSHostProcessInfo", "Get-PSProvider",
	"Get-PSSession", "Get-PSSubsystem", "Get-Random", "Get-Runspace", "Get-RunspaceDebug",
	"Get-SecureRandom", "Get-TimeZone", "Get-TraceSource", "Get-TypeData", "Get-UICulture", "Get-Unique",
	"Get-Uptime", "Get-Variable", "Get-Verb",
}

// pwshGetFallback maps the folded Get- cmdlet names to their spelling.
var pwshGetFallback = func() map[string]string {
	m := map[string]string{}
	for _, n := range pwshGetCmdlets {
		m[Fold(n)] = n
	}
	return m
}()

// pwshCanonical maps the folded names of the cmdlets above to their
// spelling, for explanations.
var pwshCanonical = func() map[string]string {
	m := map[string]string{}
	add := func(n string) { m[Fold(n)] = n }
	for _, t := range pwshAliases {
		add(t)
	}
	for _, n := range pwshGetCmdlets {
		add(n)
	}
	for _, n := range []string{"Invoke-Expression", "Invoke-Command", "Start-Process", "Switch-Process",
		"Set-Alias", "New-Alias", "Add-Type", "New-Object", "Invoke-History", "Import-Alias", "Start-Job",
		"Start-ThreadJob", "Set-Content", "Add-Content", "Out-File", "Tee-Object", "Write-Host"} {
		add(n)
	}
	return m
}()

// Fold folds s for PowerShell's case-insensitive comparisons of names,
// variables, members, types and parameters: .NET's OrdinalIgnoreCase
// compares upper-case forms, so ı and ſ match i and s (`rı` is the alias ri).
// The result is in lower case, as the tables here are.
func Fold(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.ToLower(strings.ToUpper(s))
		}
	}
	return strings.ToLower(s)
}

// Base is the command name of a path or module-qualified name: the part
// after the last / or \ (pwsh on Linux accepts both as separators, and
// Module\Cmdlet names a cmdlet). isPath reports that there was one: a path
// is never an alias.
func Base(name string) (base string, isPath bool) {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		return name[i+1:], true
	}
	return name, false
}

// AliasTarget is the command a built-in alias of pwsh 7 on Linux runs
// (through aliases of aliases); ok is false when name is no alias.
func AliasTarget(name string) (string, bool) {
	if len(name) > 16 { // longer than any alias
		return "", false
	}
	t, ok := pwshAliases[Fold(name)]
	for range 4 {
		if !ok {
			break
		}
		next, more := pwshAliases[Fold(t)]
		if !more {
			break
		}
		t = next
	}
	return t, ok
}

// canonical is name spelled as PowerShell spells the cmdlet, when known.
func canonical(name string) string {
	if c, ok := pwshCanonical[Fold(name)]; ok {
		return c
	}
	return name
}

// Types whose static members run code or processes, or load code: a call
// through them is dynamic. Names are folded, without a leading "system.".
var pwshDynamicTypes = map[string]bool{
	"scriptblock": true, "management.automation.scriptblock": true,
	"powershell": true, "management.automation.powershell": true,
	"runspace": true, "runspacefactory": true,
	"type": true, "activator": true, "appdomain": true, "delegate": true, "multicastdelegate": true,
	"management.automation.commandinvocationintrinsics": true,
	"management.automation.engineintrinsics":            true,
	"management.automation.pscmdlet":                    true,
}

var pwshDynamicTypePrefixes = []string{
	"diagnostics.process", // Process, ProcessStartInfo
	"management.automation.runspaces.",
	"management.automation.language.",
	"management.automation.host.",
	"reflection.",
	"runtime.interopservices.",
	"runtime.loader.",
	"linq.expressions.",
	"codedom.",
}

// dynamicType reports whether the type named name (as written in [...])
// runs or loads code rules cannot see.
func dynamicType(name string) bool {
	n := Fold(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "system.")
	if pwshDynamicTypes[n] {
		return true
	}
	for _, p := range pwshDynamicTypePrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// Members that run or compile code, start pipelines, or reach them through
// reflection: calling one is dynamic, whatever the object.
var pwshDynamicMembers = map[string]bool{
	"invokescript": true, "newscriptblock": true, "getscriptblock": true, "addscript": true,
	"addcommand": true, "addstatement": true, "invokemember": true, "createinstance": true,
	"getmethod": true, "createdelegate": true, "dynamicinvoke": true, "load": true, "loadfrom": true,
	"loadfile": true, "loadwithpartialname": true, "unsafeloadfrom": true, "createnestedpipeline": true,
	"createpipeline": true, "invokecommand": true,
}
