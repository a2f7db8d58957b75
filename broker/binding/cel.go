package binding

import (
	"errors"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

// celCostLimit bounds one evaluation, so a hostile expression cannot stall a
// worker (about a million cheap operations).
const celCostLimit = 1_000_000

// Expression is a compiled CEL `when` expression over `object` and
// `oldObject` (null when there is no old side).
type Expression struct {
	source  string
	program cel.Program
}

// CompileExpression compiles src once; it must yield a bool.
func CompileExpression(src string) (*Expression, error) {
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
	)
	if err != nil {
		return nil, fmt.Errorf("creating CEL environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("compiling %q: %w", src, iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("%q yields %s, want bool", src, t)
	}
	// The checked AST only validates. The program runs from the parsed AST:
	// on dyn values the checker narrows overloads too far (it lets
	// int(object.metadata.labels["n"]) reach only int(int) and fail at run
	// time), while an unchecked program dispatches on the values it meets.
	parsed, iss := env.Parse(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("parsing %q: %w", src, iss.Err())
	}
	prg, err := env.Program(parsed, cel.CostLimit(celCostLimit))
	if err != nil {
		return nil, fmt.Errorf("building %q: %w", src, err)
	}
	return &Expression{source: src, program: prg}, nil
}

// String is the expression's source.
func (e *Expression) String() string { return e.source }

// Eval evaluates the expression. old may be nil.
func (e *Expression) Eval(object, old map[string]any) (bool, error) {
	vars := map[string]any{"object": object, "oldObject": types.NullValue}
	if old != nil {
		vars["oldObject"] = old
	}
	out, _, err := e.program.Eval(vars)
	if err != nil {
		return false, fmt.Errorf("evaluating %q: %w", e.source, err)
	}
	if out.Type() != types.BoolType {
		return false, fmt.Errorf("evaluating %q: %w", e.source, errors.New("result is not a bool"))
	}
	return out.Value().(bool), nil
}
