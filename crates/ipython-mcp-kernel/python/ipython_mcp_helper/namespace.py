"""The namespace tools: ``list``, ``search``, ``inspect``, ``call_function``, ``reload``,
``remove``, ``reset``, and the configured namespace (library paths, preloads and aliases).

They read and change the shell's ``user_ns`` by dict and attribute access only; nothing is ever
eval'd.
"""

import importlib
import inspect
import keyword
import os
import re
import sys
import types

from .bounds import bounded_text, guarded_value, qualified_type, safe_repr, safe_str, sanitize_text, type_label
from .jsonconv import call_for_json
from .rpc import METHODS, MAX_ERROR_MESSAGE_CHARS, RequestError, checked_params, current, execution_error, string_list_param

# config["namespace"] (optional): what install adds to the user namespace.
NAMESPACE_KEYS = ("library_paths", "preload_modules", "module_aliases")


# These functions take the pieces they need (a user_ns dict, IPython's user_ns_hidden, the
# configured binding names, the config), so they are tested without a kernel. Every access to
# a user object that can run user code (repr, getattr, __doc__, signatures, isinstance through
# a __class__ property) is guarded: a hostile object gives a placeholder, never a crash.

# IPython's own bindings in user_ns, protected as docs/src/tools.md ("Protected names") lists them.
IPYTHON_BINDINGS = frozenset(("In", "Out", "get_ipython", "exit", "quit", "open"))

_MISSING = object()


def is_protected(name, bindings):
    """True for a name ``remove`` refuses and ``reset`` keeps: a name starting with ``_``,
    IPython's bindings, and the configured module bindings (``bindings``, a set of names)."""
    return not isinstance(name, str) or name.startswith("_") or name in IPYTHON_BINDINGS or name in bindings


def is_hidden(name, value, hidden):
    """True when ``name`` still holds the value IPython itself put there (``user_ns_hidden``);
    a hidden name the user rebound (another object) is the user's."""
    return hidden.get(name, _MISSING) is value


def user_names(user_ns, hidden, bindings):
    """The user-created top-level names, sorted: not protected and not IPython's own."""
    return sorted(
        name
        for name, value in list(user_ns.items())
        if not is_protected(name, bindings) and not is_hidden(name, value, hidden)
    )


def value_kind(value):
    """``module``, ``class``, ``function`` (functions, methods, builtins) or ``variable``."""
    if guarded_value(lambda: isinstance(value, types.ModuleType), False):
        return "module"
    if guarded_value(lambda: isinstance(value, type), False):
        return "class"
    if guarded_value(lambda: inspect.isroutine(value), False):
        return "function"
    return "variable"


def callable_kind(value):
    """``list``'s kind of a value: ``function``, ``class`` or ``callable`` (any other callable
    object); None for what ``list`` does not show (non-callables and modules)."""
    kind = value_kind(value)
    if kind in ("function", "class"):
        return kind
    if kind == "module" or not callable(value):
        return None
    return "callable"


def module_name(value):
    """The module a value belongs to: a module's own ``__name__``, else its ``__module__``
    when that is a str (functions, classes, instances of user classes); else None."""
    if guarded_value(lambda: isinstance(value, types.ModuleType), False):
        name = guarded_value(lambda: value.__name__, None)
    else:
        name = guarded_value(lambda: getattr(value, "__module__", None), None)
    return sanitize_text(name) if isinstance(name, str) else None


def signature_text(value):
    """``str(inspect.signature(value))``, or "" when there is none (or computing it raised)."""
    try:
        text = str(inspect.signature(value))
    except Exception:
        return ""
    return text


def documentation_text(value):
    """``inspect.getdoc(value)`` (cleaned, inherited where inspect finds it), or ""."""
    try:
        doc = inspect.getdoc(value)
    except Exception:
        return ""
    return doc if isinstance(doc, str) else ""


def first_paragraph(text):
    """The text up to its first blank line, stripped."""
    return re.split(r"\n[ \t]*\n", text.strip(), maxsplit=1)[0]


def bounded_fields(fields, truncated):
    """Bounds ``(key, text or None, max_chars)`` triples into a dict, recording one flag per
    field in ``truncated`` (a None text stays None, not cut)."""
    result = {}
    for key, text, max_chars in fields:
        if text is None:
            result[key], truncated[key] = None, False
        else:
            result[key], truncated[key] = bounded_text(text, max_chars)
    return result


def describe_callable(name, value, kind, config):
    """One entry of ``list``."""
    limit = config["max_repr_chars"]
    truncated = {}
    texts = bounded_fields(
        (
            ("signature", signature_text(value), limit),
            ("module", module_name(value), limit),
            ("doc", first_paragraph(documentation_text(value)), limit),
        ),
        truncated,
    )
    return {"name": sanitize_text(name), "kind": kind, **texts, "truncated": truncated}


def describe_value(name, value, config):
    """One entry of ``search``."""
    limit = config["max_repr_chars"]
    truncated = {}
    texts = bounded_fields(
        (
            ("qualified_type", qualified_type(value), limit),
            ("module", module_name(value), limit),
            ("representation", safe_repr(value), limit),
        ),
        truncated,
    )
    return {"name": sanitize_text(name), "kind": value_kind(value), **texts, "truncated": truncated}


def _signature_or_none(value):
    """``str(inspect.signature(value))``, None for an object that has none (ValueError or
    TypeError from inspect): "" would read as an empty parameter list. Anything else the
    object's own code raised propagates."""
    try:
        return str(inspect.signature(value))
    except (ValueError, TypeError):
        return None


def _documentation_or_empty(value):
    doc = inspect.getdoc(value)
    return doc if isinstance(doc, str) else ""


def _own_module(value):
    """Like ``module_name``, but an access that raises (other than AttributeError)
    propagates."""
    if guarded_value(lambda: isinstance(value, types.ModuleType), False):
        name = value.__name__
    else:
        name = getattr(value, "__module__", None)
    return sanitize_text(name) if isinstance(name, str) else None


def describe_in_detail(name, value, config):
    """``inspect``'s result. A field whose computation ran the object's code and raised
    (``__repr__``, a ``__doc__``, ``__signature__`` or ``__module__`` property) is null, and a
    ``RequestError("execution_error")`` carrying the rest as its ``partial`` says which
    fields and why: a placeholder would pass for the object's own text."""
    failures = []

    def attempt(field, action):
        try:
            return action()
        except Exception as error:
            failures.append((field, error))
            return None

    is_callable = callable(value)
    repr_limit = config["max_repr_chars"]
    truncated = {}
    texts = bounded_fields(
        (
            ("qualified_type", qualified_type(value), repr_limit),
            ("signature", attempt("signature", lambda: _signature_or_none(value)) if is_callable else None, repr_limit),
            ("module", attempt("module", lambda: _own_module(value)), repr_limit),
            ("documentation", attempt("documentation", lambda: _documentation_or_empty(value)), config["max_text_chars"]),
            ("representation", attempt("representation", lambda: repr(value)), repr_limit),
        ),
        truncated,
    )
    result = {
        "name": sanitize_text(name),
        "kind": value_kind(value),
        "callable": is_callable,
        **texts,
        "truncated": truncated,
    }
    if failures:
        fields = ", ".join(field for field, _ in failures)
        error = execution_error(failures[0][1], "computing the %s of %r raised" % (fields, name), config)
        error.partial = result
        raise error
    return result


def resolve(user_ns, dotted, config):
    """The object a dotted name ``a.b.c`` names: ``user_ns["a"]``, then ``getattr`` per segment.

    Raises ``RequestError``: ``invalid_name`` (not a str, empty, or a segment that is not an
    identifier), ``name_not_found`` (the root is not in ``user_ns``, or an attribute is missing;
    the message names the segment), ``execution_error`` (an attribute access raised something
    other than AttributeError).
    """
    if not isinstance(dotted, str) or not dotted:
        raise RequestError("invalid_name", "a name is a non-empty string like 'f' or 'module.f'")
    segments = dotted.split(".")
    for segment in segments:
        if not segment.isidentifier():
            raise RequestError(
                "invalid_name", "%r is not a valid name: segment %r is not an identifier" % (dotted, segment)
            )
    root = segments[0]
    value = user_ns.get(root, _MISSING)
    if value is _MISSING:
        raise RequestError("name_not_found", "name %r is not defined in the namespace" % root)
    for index in range(1, len(segments)):
        resolved = ".".join(segments[:index])
        try:
            value = getattr(value, segments[index])
        except AttributeError:
            failure = RequestError("name_not_found", "%r has no attribute %r" % (resolved, segments[index]))
        except Exception as error:
            failure = execution_error(error, "getting %r raised" % ".".join(segments[: index + 1]), config)
        else:
            continue
        failure.resolved = resolved
        raise failure
    return value


def validated_namespace(namespace):
    """``config["namespace"]`` checked and normalized (every key present, duplicates dropped).

    Raises ValueError naming the setting: unknown keys, wrong types, a library path that is not
    an existing directory, a module name that is not dotted identifiers, a binding that is not
    an identifier (or is a keyword or one of IPython's bindings), and two configured bindings of
    one name to different modules.
    """
    where = "config['namespace']"
    if namespace is None:
        namespace = {}
    if not isinstance(namespace, dict):
        raise ValueError("%s must be a dict, got %s" % (where, type(namespace).__name__))
    unknown = sorted(repr(key) for key in namespace if key not in NAMESPACE_KEYS)
    if unknown:
        raise ValueError("%s has unknown keys %s (known: %s)" % (where, ", ".join(unknown), ", ".join(NAMESPACE_KEYS)))
    paths = _string_list(namespace.get("library_paths"), where + "['library_paths']")
    for index, path in enumerate(paths):
        if not path or "\0" in path or not os.path.isdir(path):
            raise ValueError("%s['library_paths'][%d]: %r is not an existing directory" % (where, index, path))
    preloads = _string_list(namespace.get("preload_modules"), where + "['preload_modules']")
    for index, module in enumerate(preloads):
        _check_module_name(module, "%s['preload_modules'][%d]" % (where, index))
    aliases = namespace.get("module_aliases")
    aliases = {} if aliases is None else aliases
    if not isinstance(aliases, dict):
        raise ValueError("%s['module_aliases'] must be a dict of module -> binding" % where)
    for module, binding in aliases.items():
        setting = "%s['module_aliases'][%r]" % (where, module)
        if not isinstance(module, str) or not isinstance(binding, str):
            raise ValueError("%s: modules and bindings must be strings" % setting)
        _check_module_name(module, setting)
    normalized = {
        "library_paths": list(dict.fromkeys(paths)),
        "preload_modules": list(dict.fromkeys(preloads)),
        "module_aliases": dict(aliases),
    }
    targets = {}
    for _, binding, bound, setting in _configured_imports(normalized):
        if not binding.isidentifier() or keyword.iskeyword(binding):
            raise ValueError("%s: binding %r is not an identifier" % (setting, binding))
        if binding in IPYTHON_BINDINGS:
            raise ValueError("%s: binding %r collides with IPython's own %r" % (setting, binding, binding))
        if targets.setdefault(binding, bound) != bound:
            raise ValueError(
                "%s: binding %r collides: it is configured for both %r and %r" % (setting, binding, targets[binding], bound)
            )
    return normalized


def _string_list(value, setting):
    value = [] if value is None else value
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("%s must be a list of strings" % setting)
    return value


def _check_module_name(module, setting):
    if not module or not all(part.isidentifier() and not keyword.iskeyword(part) for part in module.split(".")):
        raise ValueError("%s: %r is not a module name (dotted identifiers)" % (setting, module))


def _configured_imports(namespace):
    """``(module to import, binding, module bound, setting)`` per preload and alias, in config
    order: ``import a.b`` binds ``a`` to module ``a``; ``import m as x`` binds ``x`` to ``m``."""
    imports = []
    for index, module in enumerate(namespace["preload_modules"]):
        root = module.partition(".")[0]
        imports.append((module, root, root, "config['namespace']['preload_modules'][%d]" % index))
    for module, binding in namespace["module_aliases"].items():
        imports.append((module, binding, module, "config['namespace']['module_aliases'][%r]" % module))
    return imports


def configured_bindings(namespace):
    """The names the configured preloads and aliases bind (protected names)."""
    return frozenset(binding for _, binding, _, _ in _configured_imports(namespace))


def apply_library_paths(namespace):
    """Puts the library paths first on ``sys.path``, in order, each once."""
    paths = namespace["library_paths"]
    for path in reversed(paths):
        while path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    if paths:
        importlib.invalidate_caches()


def bind_configured(user_ns, namespace):
    """Imports every preload and alias and binds it in ``user_ns``; never raises for a module.

    Returns ``[{"module", "code": "module_not_found"|"execution_error", "message"}]`` for the
    ones that failed (their bindings are left as they were).
    """
    errors = []
    for module, binding, bound, _ in _configured_imports(namespace):
        try:
            imported = importlib.import_module(module)
            value = imported if bound == module else sys.modules[bound]
        except (Exception, SystemExit) as error:
            errors.append({"module": module, "code": _import_error_code(module, error), "message": _import_error_message(error)})
            continue
        user_ns[binding] = value
    return errors


def _import_error_code(module, error):
    """``module_not_found`` when the module itself (or a parent package) is missing; an import
    that fails inside the module's own code, even on a missing dependency, is its error."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if isinstance(missing, str) and (module == missing or module.startswith(missing + ".")):
        return "module_not_found"
    return "execution_error"


def _import_error_message(error):
    return bounded_text("%s: %s" % (type(error).__name__, safe_str(error)), MAX_ERROR_MESSAGE_CHARS)[0]


def reload_module(user_ns, name, config):
    """Reloads one module already in ``sys.modules``; returns its entry of ``reload``'s result.

    ``importlib.reload`` re-executes the module in its own dict, so names bound to the module
    object see the new code at once; they are reported in ``rebound``. Names bound by
    ``from module import x`` hold the *old* attribute: each one that is identical to an
    attribute before the reload, and either has that attribute's name or is a function or
    class defined in the module, is rebound to the attribute's new value and is reported in
    ``rebound`` too. A failed reload (a SyntaxError in the edited file, an exception at import
    time, an interrupt) restores the module's previous dict, so the old module and every
    binding to it keep working, and becomes this module's ``execution_error``.
    """
    module = sys.modules.get(name) if isinstance(name, str) else None
    if not isinstance(module, types.ModuleType):
        return _reload_entry(name, [], {
            "code": "module_not_found",
            "message": "module %r is not imported (reload only reloads modules in sys.modules)" % name,
        })
    before = dict(module.__dict__)
    _drop_stale_bytecode(module)
    try:
        reloaded = importlib.reload(module)
    except BaseException as error:
        current = module.__dict__  # compared by identity: == could run user code
        if len(current) != len(before) or any(current.get(key, _MISSING) is not value for key, value in before.items()):
            module.__dict__.clear()
            module.__dict__.update(before)
        sys.modules[name] = module
        failure = execution_error(error, "reloading %r raised" % name, config)
        if isinstance(error, ModuleNotFoundError) and getattr(error, "name", None) == name:
            failure.code = "module_not_found"
        return _reload_entry(name, [], dict(failure.fields, code=failure.code, message=failure.message))
    return _reload_entry(name, _rebind(user_ns, name, module, reloaded, before), None)


def _reload_entry(name, rebound, error):
    if error is not None and "message" in error:
        error["message"] = bounded_text(error["message"], MAX_ERROR_MESSAGE_CHARS)[0]
    return {
        "module": sanitize_text(name) if isinstance(name, str) else name,
        "ok": error is None,
        "rebound": rebound,
        "error": error,
    }


def _rebind(user_ns, name, old_module, new_module, before):
    attributes_by_identity = {}
    for attribute, value in before.items():
        if not attribute.startswith("__"):
            attributes_by_identity.setdefault(id(value), []).append(attribute)
    new_attributes = new_module.__dict__
    rebound = []
    for user_name, value in list(user_ns.items()):
        if not isinstance(user_name, str):
            continue
        if value is old_module or value is new_module:
            user_ns[user_name] = new_module
            rebound.append(user_name)
            continue
        if value is None or value is True or value is False or value is Ellipsis:
            continue
        candidates = attributes_by_identity.get(id(value))
        if not candidates or before[candidates[0]] is not value:
            continue
        if user_name in candidates:
            attribute = user_name
        elif not user_name.startswith("_") and _defined_in(value, name):
            attribute = min(candidates)
        else:
            continue  # an unrelated name that happens to hold the same (e.g. small int) object
        new_value = new_attributes.get(attribute, _MISSING)
        if new_value is not _MISSING and new_value is not value:
            user_ns[user_name] = new_value
            rebound.append(user_name)
    return sorted(rebound)


def _defined_in(value, module):
    if not (inspect.isfunction(value) or guarded_value(lambda: isinstance(value, type), False)):
        return False
    return guarded_value(lambda: value.__module__, None) == module


def _drop_stale_bytecode(module):
    """Deletes the module's cached bytecode when it is not newer than the source.

    The bytecode cache is checked by the source's mtime in whole seconds and its size, so an
    edit that keeps the size within the second of the last compile (``return 1`` -> ``return 2``)
    would reload the old code. A cache written after the source is left alone.
    """
    source = guarded_value(lambda: module.__file__, None)
    cached = guarded_value(lambda: module.__cached__, None)
    if not (isinstance(source, str) and isinstance(cached, str)):
        return
    try:
        if os.stat(source).st_mtime_ns >= os.stat(cached).st_mtime_ns:
            os.remove(cached)
    except OSError:
        pass


def _method_list(params):
    checked_params(params, ())
    installation = current()
    config, user_ns = installation.config, installation.shell.user_ns
    entries = []
    for name in user_names(user_ns, installation.shell.user_ns_hidden, installation.bindings):
        value = user_ns.get(name, _MISSING)
        kind = None if value is _MISSING else callable_kind(value)
        if kind is not None:
            entries.append((name, value, kind))
    limit = config["max_results"]
    return {
        "functions": [describe_callable(name, value, kind, config) for name, value, kind in entries[:limit]],
        "total": len(entries),
        "truncated": len(entries) > limit,
    }


def _method_search(params):
    checked_params(params, ("query", "exact", "limit"))
    installation = current()
    config, user_ns = installation.config, installation.shell.user_ns
    query = params.get("query")
    exact = params.get("exact", False)
    limit = params.get("limit")
    if not isinstance(query, str):
        raise RequestError("invalid_request", "'query' must be a string")
    if exact is None:
        exact = False
    if not isinstance(exact, bool):
        raise RequestError("invalid_request", "'exact' must be a boolean")
    if limit is None:
        limit = config["max_results"]
    if type(limit) is not int or limit < 0:
        raise RequestError("invalid_request", "'limit' must be a non-negative integer or null")
    limit = min(limit, config["max_results"])
    names = user_names(user_ns, installation.shell.user_ns_hidden, installation.bindings)
    if exact:
        matches = [name for name in names if name == query]
    else:
        folded = query.casefold()
        matches = [name for name in names if folded in name.casefold()]
    matches.sort(key=lambda name: (name != query, name))
    results = [describe_value(name, user_ns.get(name), config) for name in matches[:limit]]
    return {"results": results, "total": len(matches), "truncated": len(matches) > len(results)}


def _method_inspect(params):
    checked_params(params, ("name",))
    installation = current()
    name = params.get("name")
    try:
        value = resolve(installation.shell.user_ns, name, installation.config)
    except RequestError as error:
        # Keep what was resolved: the agent learns where the path broke.
        resolved = getattr(error, "resolved", None)
        if resolved is not None:
            error.partial = {"name": sanitize_text(name), "resolved": sanitize_text(resolved)}
        raise
    return describe_in_detail(name, value, installation.config)


def _method_call_function(params):
    checked_params(params, ("name", "arguments"))
    installation = current()
    config = installation.config
    name = params.get("name")
    arguments = params.get("arguments", {})
    function = resolve(installation.shell.user_ns, name, config)
    if not callable(function):
        raise RequestError("not_callable", "%r is not callable (it is a %s)" % (name, type_label(function)))
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict) or not all(isinstance(key, str) for key in arguments):
        raise RequestError(
            "invalid_arguments", "'arguments' must be a JSON object of keyword arguments, got %s" % type(arguments).__name__
        )
    try:
        signature = inspect.signature(function)
    except Exception:
        signature = None  # e.g. a builtin without one: the call itself will say
    if signature is not None:
        try:
            signature.bind(**arguments)
        except TypeError as error:
            raise RequestError("invalid_arguments", "%s%s: %s" % (name, signature_text(function), safe_str(error))) from None
    return call_for_json(function, name, arguments, config)


def _method_reload(params):
    checked_params(params, ("modules",))
    installation = current()
    names = list(dict.fromkeys(string_list_param(params, "modules")))
    importlib.invalidate_caches()  # a module file created since the last import is found
    results = []
    interrupted = False
    for name in names:
        if interrupted:  # the server interrupted this request: reload nothing more
            results.append(_reload_entry(name, [], {
                "code": "execution_error",
                "message": "not reloaded: the request was interrupted while reloading an earlier module",
                "ename": "KeyboardInterrupt",
                "evalue": "",
                "traceback": [],
            }))
            continue
        entry = reload_module(installation.shell.user_ns, name, installation.config)
        interrupted = (entry["error"] or {}).get("ename") == "KeyboardInterrupt"
        results.append(entry)
    return {"results": results}


def _method_remove(params):
    checked_params(params, ("names",))
    installation = current()
    user_ns, hidden = installation.shell.user_ns, installation.shell.user_ns_hidden
    removed, refused, unknown = [], [], []
    for name in sorted(set(string_list_param(params, "names"))):
        value = user_ns.get(name, _MISSING)
        if is_protected(name, installation.bindings) or (value is not _MISSING and is_hidden(name, value, hidden)):
            refused.append(name)  # hidden: IPython's own binding, even if the docs' protected list does not name it
        elif value is _MISSING:
            unknown.append(name)
        else:
            del user_ns[name]
            removed.append(name)
    return {"removed": removed, "refused": refused, "unknown": unknown}


def _method_reset(params):
    checked_params(params, ())
    installation = current()
    shell = installation.shell
    removed = user_names(shell.user_ns, shell.user_ns_hidden, installation.bindings)
    for name in removed:
        shell.user_ns.pop(name, None)
    installation.namespace_errors = bind_configured(shell.user_ns, installation.config["namespace"])
    # The dynamic tools name user_ns bindings, which just went (the catalog is the tools module's).
    catalog = getattr(installation, "tools", None)
    tools_dropped = catalog.drop_all() if catalog is not None else 0
    # IPython's counter is the *next* cell's number; report the latest cell's, as execute does.
    return {
        "removed": removed,
        "execution_count": max(shell.execution_count - 1, 0),
        "tools_dropped": tools_dropped,
    }


METHODS.update(
    {
        "list": _method_list,
        "search": _method_search,
        "inspect": _method_inspect,
        "call_function": _method_call_function,
        "reload": _method_reload,
        "remove": _method_remove,
        "reset": _method_reset,
    }
)
