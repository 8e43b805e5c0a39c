// Package celpolicy runs ValidatingAdmissionPolicies and admission
// webhooks' matchConditions on objects the way kube-apiserver does, with
// k8s.io/apiserver's own CEL environment, compiler and validator: the
// checks the API server makes when a policy is created (every expression
// compiled in the environment of new expressions), and the decision it
// reaches when it evaluates one (the first failed validation's message,
// or an evaluation error, which failurePolicy Fail turns into a refusal).
// Unit tests use it; the end-to-end tests run the same policies on a real
// API server.
package celpolicy

import (
	"context"
	"errors"
	"fmt"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/yamldocs"
)

// Request is what an admission request shows the expressions.
type Request struct {
	Object    runtime.Object // typed, as the API server hands it over
	Kind      schema.GroupVersionKind
	Resource  schema.GroupVersionResource
	Operation admission.Operation
	Namespace string
	Name      string
	User      string // the requester's user name
}

// Manifests are the admission objects of a multi-document YAML file.
type Manifests struct {
	Policies []admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding
	Webhooks []admissionregistrationv1.MutatingWebhookConfiguration
}

// Load reads the policies, bindings and mutating webhook configurations
// of YAML files; other kinds are skipped.
func Load(paths ...string) (*Manifests, error) {
	m := &Manifests{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		docs, err := yamldocs.Split(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, doc := range docs {
			if err := m.add(doc); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	return m, nil
}

func (m *Manifests) add(doc []byte) error {
	var head struct{ Kind string }
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	var into any
	switch head.Kind {
	case "ValidatingAdmissionPolicy":
		m.Policies = append(m.Policies, admissionregistrationv1.ValidatingAdmissionPolicy{})
		into = &m.Policies[len(m.Policies)-1]
	case "ValidatingAdmissionPolicyBinding":
		m.Bindings = append(m.Bindings, admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
		into = &m.Bindings[len(m.Bindings)-1]
	case "MutatingWebhookConfiguration":
		m.Webhooks = append(m.Webhooks, admissionregistrationv1.MutatingWebhookConfiguration{})
		into = &m.Webhooks[len(m.Webhooks)-1]
	default:
		return nil
	}
	return yaml.UnmarshalStrict(doc, into)
}

// Policy is a compiled ValidatingAdmissionPolicy.
type Policy struct {
	Name      string
	validator validating.Validator
}

// Oldest is the CEL compatibility version of the oldest kube-apiserver
// the manifests must be accepted by: 1.34, the first release with
// DRAConsumableCapacity. An API server compiles new expressions with the
// libraries of its compatibility version, its own minus one (so that a
// rollback still reads what it stored): 1.33 there.
var Oldest = version.MajorMinor(1, 33)

// newEnvs are the environments a policy being created is compiled in: the
// oldest supported API server's and this library's own.
func newEnvs() []*environment.EnvSet {
	return []*environment.EnvSet{environment.MustBaseEnvSet(Oldest),
		environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())}
}

// Compile checks a policy's expressions as the API server does when the
// policy is created (for every supported API server), and compiles it as
// the API server does to evaluate it.
func Compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) (*Policy, error) {
	for _, env := range newEnvs() {
		if err := checkNew(p, env); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
	}
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	compiler, err := plugincel.NewCompositedCompiler(env)
	if err != nil {
		return nil, err
	}
	vars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil}
	named := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		named[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
	conds := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	msgs := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		conds[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			msgs[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		mc := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			mc[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(mc, vars, environment.StoredExpressions),
			p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	v := validating.NewValidator(
		compiler.CompileCondition(conds, vars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(nil, vars, environment.StoredExpressions),
		compiler.CompileCondition(msgs, msgVars, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
	if err := v.CompileError(); err != nil {
		return nil, err
	}
	return &Policy{Name: p.Name, validator: v}, nil
}

// checkNew compiles every expression of a policy in the environment the
// API server gives expressions of a policy being created.
func checkNew(p *admissionregistrationv1.ValidatingAdmissionPolicy, env *environment.EnvSet) error {
	compiler, err := plugincel.NewCompositedCompiler(env)
	if err != nil {
		return err
	}
	vars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	msgVars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil}
	for _, v := range p.Spec.Variables {
		if r := compiler.CompileCELExpression(&validating.Variable{Name: v.Name, Expression: v.Expression}, vars, environment.NewExpressions); r.Error != nil {
			return fmt.Errorf("variable %s: %w", v.Name, r.Error)
		}
		compiler.CompileAndStoreVariables([]plugincel.NamedExpressionAccessor{&validating.Variable{Name: v.Name, Expression: v.Expression}},
			vars, environment.NewExpressions)
	}
	for i, v := range p.Spec.Validations {
		if r := compiler.CompileCELExpression(&validating.ValidationCondition{Expression: v.Expression}, vars, environment.NewExpressions); r.Error != nil {
			return fmt.Errorf("validations[%d].expression: %w", i, r.Error)
		}
		if v.MessageExpression == "" {
			continue
		}
		if r := compiler.CompileCELExpression(&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}, msgVars, environment.NewExpressions); r.Error != nil {
			return fmt.Errorf("validations[%d].messageExpression: %w", i, r.Error)
		}
	}
	stateless := plugincel.NewCompiler(env)
	for i, c := range p.Spec.MatchConditions {
		if r := stateless.CompileCELExpression(&matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}, vars, environment.NewExpressions); r.Error != nil {
			return fmt.Errorf("matchConditions[%d]: %w", i, r.Error)
		}
	}
	return nil
}

// ErrEvaluation marks an expression that failed to evaluate (the API
// server then applies the policy's failurePolicy).
var ErrEvaluation = errors.New("evaluation error")

// Validate evaluates the policy on a request as the API server does:
// "" when it admits, else the message of its first failed validation, as
// the API server reports it after "ValidatingAdmissionPolicy ... denied
// request: ". An expression that fails is an error wrapping ErrEvaluation.
func (p *Policy) Validate(req Request) (string, error) {
	attr := admission.NewAttributesRecord(req.Object, nil, req.Kind, req.Namespace, req.Name, req.Resource, "",
		req.Operation, nil, false, &user.DefaultInfo{Name: req.User})
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: req.Kind, VersionedObject: admission.NewLazyObject(req.Object)}
	res := p.validator.Validate(context.Background(), req.Resource, va, nil, namespaceOf(req), celconfig.RuntimeCELCostBudget, nil)
	for _, d := range res.Decisions {
		switch {
		case d.Evaluation == validating.EvalError:
			return "", fmt.Errorf("%w: policy %s: %s", ErrEvaluation, p.Name, d.Message)
		case d.Action == validating.ActionDeny:
			return d.Message, nil
		}
	}
	return "", nil
}

func namespaceOf(req Request) *corev1.Namespace {
	if req.Namespace == "" {
		return nil
	}
	ns := &corev1.Namespace{}
	ns.Name = req.Namespace
	ns.Labels = map[string]string{"kubernetes.io/metadata.name": req.Namespace}
	return ns
}

// Matcher is a compiled list of a webhook's matchConditions.
type Matcher struct{ m matchconditions.Matcher }

// CompileMatchConditions compiles a webhook's matchConditions as the API
// server does, after checking them as it does when the configuration is
// created.
func CompileMatchConditions(w *admissionregistrationv1.MutatingWebhook) (*Matcher, error) {
	vars := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	exprs := make([]plugincel.ExpressionAccessor, len(w.MatchConditions))
	for i, c := range w.MatchConditions {
		mc := &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
		for _, env := range newEnvs() {
			if r := plugincel.NewCompiler(env).CompileCELExpression(mc, vars, environment.NewExpressions); r.Error != nil {
				return nil, fmt.Errorf("webhook %s: matchConditions[%d]: %w", w.Name, i, r.Error)
			}
		}
		exprs[i] = mc
	}
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	compiler := plugincel.NewConditionCompiler(env)
	return &Matcher{m: matchconditions.NewMatcher(compiler.CompileCondition(exprs, vars, environment.StoredExpressions),
		w.FailurePolicy, "webhook", "admit", w.Name)}, nil
}

// Match reports whether the webhook is called for the request; an
// expression that fails is an error (the API server then applies the
// webhook's failurePolicy).
func (m *Matcher) Match(req Request) (bool, error) {
	attr := admission.NewAttributesRecord(req.Object, nil, req.Kind, req.Namespace, req.Name, req.Resource, "",
		req.Operation, nil, false, &user.DefaultInfo{Name: req.User})
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: req.Kind, VersionedObject: admission.NewLazyObject(req.Object)}
	r := m.m.Match(context.Background(), va, nil, nil)
	if r.Error != nil {
		return false, fmt.Errorf("%w: %v", ErrEvaluation, r.Error)
	}
	return r.Matches, nil
}
