"""TD002 vllm-tokenizer-drift end to end through the real command: tokens the training script adds that
vLLM's own tokenizer lacks, stop settings the installed TRL may not forward, ids past the embedding rows;
the fixes and the re-check. Then the TRL source reader, on the installed TRL and on excerpts copied
verbatim from old TRL releases (no network in tests), and the vLLM loader path where vllm is installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml
from packaging.version import Version

from conftest import check_here, result_of, run_doctor, run_json
from trl_doctor.facts.vllm import handover as _vllm

SELECT = ("--select", "vllm-tokenizer-drift")


def _installed_trl_forwards() -> bool:
    path = _vllm.installed_trl_vllm_path("grpo")
    return bool(path and path.colocate.forwards)


def _tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


# -- through the command --------------------------------------------------------------------------------

def test_stop_string_on_unsaved_added_token_fails_and_fix_saves_the_tokenizer(fixture_copy):
    config = fixture_copy / "vllm-tokenizer-drift" / "bad_stop_string_added_tokens.yaml"
    model = fixture_copy / "models" / "qwen2-search"
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert code == 1 and r["status"] == "fail", r
    d = r["details"]
    assert d["missing in vLLM's tokenizer (token: trainer id)"] == {"<search>": 320, "</search>": 321}
    assert d["vLLM's text for those ids"] == {"320": "", "321": ""}
    assert d["stop settings resolved"]["</search>"] == {"trainer ids": [321], "vLLM text for them": ""}
    assert d["vLLM loads from"].startswith(str(model))
    assert d["vLLM tokenizer loaded with"].startswith(("transformers AutoTokenizer", "vllm."))
    never_fires = "stop string '</search>' never fires: the trainer's tokenizer writes it as ids [321]"
    if not _installed_trl_forwards():
        # trl before 0.19: the stop string cannot reach vLLM at all; saving the tokenizer would not help
        assert "never reach vLLM" in r["message"] and "'</search>'" in r["message"]
        assert any(never_fires in a for a in d["also"])
        assert r["fix"]["applicability"] == "manual" and "upgrade trl" in r["fix"]["description"]
        return
    assert r["message"].startswith(never_fires) and str(model) in r["message"]
    assert d["vllm_mode"].startswith("colocate")  # TRL 1.x's default
    assert any("vllm_generation.py" in e for e in d["generation_kwargs -> vLLM (colocate)"])
    assert r["fix"]["unsafe"] is False
    assert r["fix"]["files"] == sorted([str(config), str(model / "tokenizer.json"), str(model / "tokenizer_config.json")])

    # --diff shows it and writes nothing
    diff = run_doctor("check", str(config), *SELECT, "--diff")
    assert '"content": "</search>"' in diff.stdout and "+  skip_special_tokens: false" in diff.stdout
    assert "</search>" not in _tokenizer(model).get_vocab()

    code, report = run_json("check", str(config), *SELECT, "--fix")
    r = result_of(report, "TD002")
    assert code == 0 and r["status"] == "pass", r
    assert r["fix"]["applied"] is True
    tok = _tokenizer(model)
    assert tok.convert_tokens_to_ids(["<search>", "</search>"]) == [320, 321]
    gen = yaml.safe_load(config.read_text())["generation_kwargs"]
    assert gen == {"stop": ["</search>"], "skip_special_tokens": False, "include_stop_str_in_output": True}
    assert "# The training script adds" in config.read_text()  # comments kept
    assert sorted(p.name for p in model.glob("*.trl-doctor.bak*")) == ["tokenizer.json.trl-doctor.bak", "tokenizer_config.json.trl-doctor.bak"]
    tok_cfg = json.loads((model / "tokenizer_config.json").read_text())
    assert "local_files_only" not in tok_cfg and "is_local" not in tok_cfg
    assert r["details"]["stop settings resolved"]["</search>"]["vLLM text for them"] == "</search>"

    # a second --fix changes nothing
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    code, report = run_json("check", str(config), *SELECT, "--fix")
    assert code == 0 and report["applied"] == []
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


def test_stop_token_id_severity_follows_what_the_installed_trl_forwards(fixture_copy):
    config = fixture_copy / "vllm-tokenizer-drift" / "bad_stop_token_ids.yaml"
    model = fixture_copy / "models" / "qwen2-toolcall"
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert r["details"]["stop settings resolved"]["stop_token_ids 321"] == {"trainer token": "</tool_call>", "vLLM token": None}
    if _installed_trl_forwards():
        # vLLM compares ids and the id reaches SamplingParams: what is left is the drift in vLLM's own text
        assert r["status"] == "warn" and code == 0
        assert "lacks '<tool_call>' (id 320), '</tool_call>' (id 321)" in r["message"]
        assert str(model) in r["message"]
    else:
        assert r["status"] == "fail"
        assert "stop_token_ids never reach vLLM" in r["message"] and "321" in r["message"]
    code, report = run_json("check", str(config), *SELECT, "--fix")
    if _installed_trl_forwards():
        assert code == 0 and result_of(report, "TD002")["status"] == "pass"
        assert _tokenizer(model).convert_tokens_to_ids("</tool_call>") == 321
        assert {a["file"] for a in report["applied"]} == {str(model / "tokenizer.json"), str(model / "tokenizer_config.json")}


def test_what_no_file_change_repairs_is_a_manual_fix(fixture_copy):
    """A stop id past the embedding rows: the steps by hand are the fix (manual: shown, never applied), and the
    finding points at generation_kwargs in the config."""
    config = fixture_copy / "vllm-tokenizer-drift" / "bad_stop_token_ids.yaml"
    spec = yaml.safe_load(config.read_text())
    spec["generation_kwargs"] = {"stop_token_ids": [1_000_000]}
    config.write_text(yaml.safe_dump(spec))
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert code == 1 and r["status"] == "fail", r
    if _installed_trl_forwards():
        assert r["message"].startswith("stop_token_ids 1000000 is past the")
    assert r["fix"]["applicability"] == "manual" and r["fix"]["files"] == []
    assert "remove stop_token_ids 1000000 from generation_kwargs" in r["fix"]["description"]
    assert "save the trainer's tokenizer into" in r["fix"]["description"]  # the drift is left to do by hand too
    assert "fix (by hand)" not in r["details"]
    assert r["location"]["file"] == str(config) and r["location"]["key"] == "generation_kwargs"
    before = config.read_text()
    code, report = run_json("check", str(config), *SELECT, "--fix")
    assert report["applied"] == [] and config.read_text() == before  # never applied


def test_a_resize_the_doctor_cannot_do_is_a_manual_fix(fixture_copy):
    """Ids past the embedding rows of a checkpoint without a single model.safetensors: the resize is described
    as steps by hand."""
    config = fixture_copy / "vllm-tokenizer-drift" / "bad_beyond_vocab_without_vllm.yaml"
    model = fixture_copy / "models" / "gpt2-unresized-novllm"
    (model / "model.safetensors").rename(model / "weights-elsewhere.bin")
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert code == 1 and r["status"] == "fail" and "(with or without vLLM)" in r["message"]
    assert r["fix"]["applicability"] == "manual"
    assert r["fix"]["description"].startswith("only single-file model.safetensors checkpoints are resized automatically: "
                                              "model.resize_token_embeddings(322)")


def test_separate_tokenizer_past_the_embedding_needs_the_unsafe_resize(fixture_copy):
    config = fixture_copy / "vllm-tokenizer-drift" / "bad_tokenizer_beyond_vocab.yaml"
    model = fixture_copy / "models" / "gpt2-unresized"
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert code == 1 and r["status"] == "fail"
    assert r["message"].startswith("'<search>' (id 320), '</search>' (id 321) are past the model's 320 embedding rows")
    assert str(model / "config.json") in r["message"]
    assert r["details"]["ids past the embedding rows"] == {"<search>": 320, "</search>": 321}
    if r["details"]["vllm_mode"] == "server (set in the config)":
        assert "trl vllm-serve --model" in r["details"]["vLLM loads from"]
    else:  # trl 0.14/0.15 only run vLLM inside the trainer
        assert "has no server mode" in r["details"]["vllm_mode"]
    assert r["fix"]["unsafe"] is True
    # described only: the weights are loaded and rewritten when --unsafe-fixes asks for it
    assert "rewrites model.safetensors" in r["fix"]["description"] and str(model) in r["fix"]["description"]

    # plain --fix leaves the weights alone (and writes no tokenizer the model could not embed)
    weights = (model / "model.safetensors").read_bytes()
    code, report = run_json("check", str(config), *SELECT, "--fix")
    assert code == 1 and report["applied"] == [] and result_of(report, "TD002")["status"] == "fail"
    assert (model / "model.safetensors").read_bytes() == weights

    code, report = run_json("check", str(config), *SELECT, "--fix", "--unsafe-fixes")
    r = result_of(report, "TD002")
    assert code == 0 and r["status"] == "pass", r
    assert json.loads((model / "config.json").read_text())["vocab_size"] == 322
    assert (model / "model.safetensors.trl-doctor.bak").read_bytes() == weights
    from transformers import AutoModelForCausalLM

    resized = AutoModelForCausalLM.from_pretrained(str(model))
    assert resized.get_input_embeddings().weight.shape[0] == 322
    assert _tokenizer(model).convert_tokens_to_ids("</search>") == 321


def test_without_vllm_only_ids_past_the_embedding_are_reported(fixture_copy, built_fixtures):
    # (ok_without_vllm.yaml, a skip, is in expected.yaml.) The pad token past the embedding is TD001's finding, not repeated here
    code, report = run_json("check", str(built_fixtures / "pad-token" / "bad_pad_outside_vocab.yaml"), *SELECT)
    assert result_of(report, "TD002")["status"] == "skip"

    config = fixture_copy / "vllm-tokenizer-drift" / "bad_beyond_vocab_without_vllm.yaml"
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert r["status"] == "fail" and "(with or without vLLM)" in r["message"]
    assert "index out of range in self" in r["message"]
    code, report = run_json("check", str(config), *SELECT, "--fix", "--unsafe-fixes")
    assert code == 0 and result_of(report, "TD002")["status"] == "skip"
    model = fixture_copy / "models" / "gpt2-unresized-novllm"
    assert json.loads((model / "config.json").read_text())["vocab_size"] == 322
    assert not (model / "tokenizer.json.trl-doctor.bak").exists()  # no vLLM: the tokenizer stays where it is


def test_saved_tokens_with_a_special_stop_string_pass(built_fixtures, tmp_path):
    """The healthy twin of the stop-string case: tokens saved, embeddings resized, vLLM told to keep special
    tokens in its text. Needs a TRL that forwards generation_kwargs (0.19 and later)."""
    if not _installed_trl_forwards():
        pytest.skip("the installed trl does not forward generation_kwargs to vLLM (checked by the stop-string test)")
    spec = yaml.safe_load((built_fixtures / "vllm-tokenizer-drift" / "ok_added_tokens_saved.yaml").read_text())
    spec["model_name_or_path"] = str(built_fixtures / "models" / "gpt2-search-resized")
    spec["dataset_path"] = str(built_fixtures / "data" / "prompts.jsonl")
    spec.pop("reward_funcs")
    spec["generation_kwargs"] = {"stop": ["</search>"], "include_stop_str_in_output": True, "skip_special_tokens": False,
                                 "stop_token_ids": [321]}
    config = tmp_path / "ok_stop.yaml"
    config.write_text(yaml.safe_dump(spec))
    code, report = check_here(config, *SELECT)
    r = result_of(report, "TD002")
    assert code == 0 and r["status"] == "pass", r
    assert "322 tokens" in r["message"] and "stop '</search>'" in r["message"] and "322 embedding rows" in r["message"]
    assert r["details"]["stop settings resolved"]["</search>"]["vLLM text for them"] == "</search>"
    assert r["details"]["stop settings resolved"]["stop_token_ids 321"] == {"trainer token": "</search>", "vLLM token": "</search>"}


# -- the comparison, on in-memory tokenizers ---------------------------------------------------------------

def test_compare_finds_swapped_ids_missing_tokens_eos_and_template(built_fixtures):
    folder = built_fixtures / "models" / "qwen2-search"
    trainer, vllm = _tokenizer(folder), _tokenizer(folder)
    trainer.add_tokens(["<a>", "<b>"], special_tokens=True)
    vllm.add_tokens(["<b>", "<a>", "<only-vllm>"], special_tokens=True)
    vllm.eos_token = "<|endoftext|>"
    vllm.chat_template = "{{ messages }}"
    from trl_doctor.rules.vllm_tokenizer_drift import compare

    d = compare(trainer, vllm)
    assert d.id_diff == {"<a>": (320, 321), "<b>": (321, 320)}
    assert d.missing_in_trainer == {"<only-vllm>": 322} and d.missing_in_vllm == {}
    assert d.eos == (("<|im_end|>", 2), ("<|endoftext|>", 0)) and d.eos_differs and d.template_differs
    assert compare(trainer, trainer).any() is False


def test_eos_problem_reads_generation_config(built_fixtures):
    from types import SimpleNamespace

    from trl_doctor.rules.vllm_tokenizer_drift import _eos_problem

    folder = built_fixtures / "models" / "qwen2-search"  # generation_config.json eos_token_id: [2, 0]
    gen = json.loads((folder / "generation_config.json").read_text())
    ctx = SimpleNamespace(read_json=lambda p: gen, model_file=lambda name: folder / name)
    trainer, vllm = _tokenizer(folder), _tokenizer(folder)
    vllm.eos_token = "<|endoftext|>"
    assert _eos_problem(ctx, trainer, vllm, []) is None  # vLLM still stops at 2: generation_config.json lists it
    gen = {"eos_token_id": 0}
    message = _eos_problem(ctx, trainer, vllm, [])
    assert message.startswith("vLLM does not stop at the trainer's eos '<|im_end|>' (id 2)")
    # a stop id 2 makes vLLM stop at the trainer's eos; without generation_config.json's eos ids, vLLM's own eos 0 then
    # ends completions that the trainer counts as truncated
    gen = {}
    assert _eos_problem(ctx, trainer, vllm, [2]).startswith("vLLM stops at its tokenizer's eos '<|endoftext|>' (id 0)")


def test_prompt_scan_for_trl_that_lets_vllm_tokenize(built_fixtures):
    """TRL before 1.0 sends prompt text (or chat messages) that vLLM tokenizes itself."""
    from types import SimpleNamespace

    import datasets

    from trl_doctor.rules.vllm_tokenizer_drift import _tokens_in_prompts

    tok = _tokenizer(built_fixtures / "models" / "qwen2-search")
    rows = [[{"role": "user", "content": "what is two"}], [{"role": "user", "content": "look it up <search>"}]]
    ctx = SimpleNamespace(dataset=datasets.Dataset.from_dict({"prompt": rows}))
    assert _tokens_in_prompts(ctx, tok, ["<search>"]) == ["dataset row 1 holds '<search>', which vLLM's tokenizer splits into pieces"]
    assert _tokens_in_prompts(ctx, tok, ["<tool_call>"]) is None
    assert _tokens_in_prompts(ctx, tok, ["<|im_start|>"])[0].startswith("the chat template writes '<|im_start|>'")


# -- the TRL source reader ----------------------------------------------------------------------------

def test_reader_on_the_installed_trl():
    from importlib.metadata import version

    trl_version = Version(version("trl"))
    for trainer in ("grpo", "rloo"):
        path = _vllm.installed_trl_vllm_path(trainer)
        assert path is not None
        if trl_version >= Version("1.0"):
            assert path.colocate.forwards is True and path.server.forwards is True, (trainer, path)
            assert path.prompts == {"ids"}
            assert path.llm_model_arg == "model.name_or_path" and path.llm_tokenizer_arg is None
            assert any("SamplingParams(**generation_kwargs)" in e for e in path.colocate.evidence)
        elif trl_version < Version("0.19") and trainer == "grpo":
            assert path.colocate.forwards is not True and path.server.forwards is not True, path
            assert "text" in path.prompts


# Excerpts copied verbatim from the released wheels on PyPI (trl-X-py3-none-any.whl), file and lines given.

TRL_0_17_SERVER_CALL = '''
                ordered_set_of_prompts = all_prompts_text[:: self.num_generations]
                with profiling_context(self, "vLLM.generate"):
                    completion_ids = self.vllm_client.generate(
                        prompts=ordered_set_of_prompts,
                        n=self.num_generations,
                        repetition_penalty=self.repetition_penalty,
                        temperature=self.temperature,
                        top_p=self.top_p,
                        top_k=-1 if self.top_k is None else self.top_k,
                        min_p=0.0 if self.min_p is None else self.min_p,
                        max_tokens=self.max_completion_length,
                        guided_decoding_regex=self.guided_decoding_regex,
                    )
'''  # trl 0.17.0, trl/trainer/grpo_trainer.py lines 941-953

TRL_0_18_2_COLOCATE = '''
            elif self.vllm_mode == "colocate":
                if self.guided_decoding_regex:
                    guided_decoding = GuidedDecodingParams(backend="outlines", regex=self.guided_decoding_regex)
                else:
                    guided_decoding = None
                sampling_params = SamplingParams(
                    n=1,  # vLLM on each GPU generates only 1 in colocate mode
                    repetition_penalty=self.repetition_penalty,
                    temperature=self.temperature,
                    top_p=self.top_p,
                    top_k=-1 if self.top_k is None else self.top_k,
                    min_p=0.0 if self.min_p is None else self.min_p,
                    max_tokens=self.max_completion_length,
                    guided_decoding=guided_decoding,
                )
'''  # trl 0.18.2, trl/trainer/grpo_trainer.py lines 1048-1062

TRL_0_19_COLOCATE = '''
            elif self.vllm_mode == "colocate":
                if self.guided_decoding_regex:
                    guided_decoding = GuidedDecodingParams(backend="outlines", regex=self.guided_decoding_regex)
                else:
                    guided_decoding = None

                generation_kwargs = {
                    "n": 1,  # vLLM on each GPU generates only 1 in colocate mode
                    "repetition_penalty": self.repetition_penalty,
                    "temperature": self.temperature,
                    "top_p": self.top_p,
                    "top_k": -1 if self.top_k is None else self.top_k,
                    "min_p": 0.0 if self.min_p is None else self.min_p,
                    "max_tokens": self.max_completion_length,
                    "guided_decoding": guided_decoding,
                }
                generation_kwargs.update(self.args.generation_kwargs)
                sampling_params = SamplingParams(**generation_kwargs)
'''  # trl 0.19.0, trl/trainer/grpo_trainer.py lines 1111-1128

TRL_0_19_SERVER_CALL = '''
                    ordered_set_of_prompts = all_prompts_text[:: self.num_generations]
                    with profiling_context(self, "vLLM.generate"):
                        completion_ids = self.vllm_client.generate(
                            prompts=ordered_set_of_prompts,
                            n=self.num_generations,
                            repetition_penalty=self.repetition_penalty,
                            temperature=self.temperature,
                            top_p=self.top_p,
                            top_k=-1 if self.top_k is None else self.top_k,
                            min_p=0.0 if self.min_p is None else self.min_p,
                            max_tokens=self.max_completion_length,
                            guided_decoding_regex=self.guided_decoding_regex,
                            generation_kwargs=self.args.generation_kwargs,
                        )
'''  # trl 0.19.0, trl/trainer/grpo_trainer.py lines 1085-1099

TRL_0_19_SERVER = '''
        generation_kwargs = {
            "n": request.n,
            "repetition_penalty": request.repetition_penalty,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "min_p": request.min_p,
            "max_tokens": request.max_tokens,
            "guided_decoding": guided_decoding,
        }
        generation_kwargs.update(request.generation_kwargs)
        sampling_params = SamplingParams(**generation_kwargs)
'''  # trl 0.19.0, trl/scripts/vllm_serve.py lines 480-491

TRL_0_16_CLIENT = '''
        url = f"http://{self.host}:{self.server_port}/generate/"
        response = self.session.post(
            url,
            json={
                "prompts": prompts,
                "n": n,
                "repetition_penalty": repetition_penalty,
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k,
                "min_p": min_p,
                "max_tokens": max_tokens,
                "guided_decoding_regex": guided_decoding_regex,
            },
        )
'''  # trl 0.16.0, trl/extras/vllm_client.py lines 171-185

TRL_0_14_COLOCATED = '''
                    self.llm = LLM(
                        model=model.name_or_path,
                        device=vllm_device,
                        gpu_memory_utilization=self.args.vllm_gpu_memory_utilization,
                    )
                self.sampling_params = SamplingParams(
                    n=self.num_generations,
                    temperature=args.temperature,
                    max_tokens=self.max_completion_length,
                )
'''  # trl 0.14.0, trl/trainer/grpo_trainer.py lines 313-322

TRL_0_14_GENERATE = '''
            all_prompts_text = gather_object(prompts_text)
            if self.accelerator.is_main_process:
                outputs = self.llm.generate(all_prompts_text, sampling_params=self.sampling_params, use_tqdm=False)
'''  # trl 0.14.0, trl/trainer/grpo_trainer.py lines 398-400

TRL_0_25_COLOCATE_CHAT = '''
                with profiling_context(self, "vLLM.generate"):
                    if is_conversational({"prompt": prompts[0]}):
                        all_outputs = self.llm.chat(all_prompts, sampling_params=sampling_params, use_tqdm=False)
                    else:
                        all_outputs = self.llm.generate(all_prompts, sampling_params=sampling_params, use_tqdm=False)
'''  # trl 0.25.0, trl/trainer/grpo_trainer.py lines 1268-1272


def test_reader_on_releases_before_0_19_finds_no_forwarding():
    (call,) = _vllm.client_call_sites(TRL_0_17_SERVER_CALL, "trl/trainer/grpo_trainer.py")
    assert call.forwards is False and call.code == "completion_ids = self.vllm_client.generate("
    (site,) = _vllm.sampling_params_sites(TRL_0_18_2_COLOCATE, "trl/trainer/grpo_trainer.py")
    assert site.forwards is False and site.how == "fixed arguments, no generation_kwargs"
    sent = _vllm.client_sends_kwargs(TRL_0_16_CLIENT, "trl/extras/vllm_client.py")
    assert sent is not None and sent.forwards is False
    (site,) = _vllm.sampling_params_sites(TRL_0_14_COLOCATED, "trl/trainer/grpo_trainer.py")
    assert site.forwards is False
    assert _vllm.llm_init_args(TRL_0_14_COLOCATED)[:2] == ("model.name_or_path", None)
    assert _vllm.prompt_paths(TRL_0_14_GENERATE, "trl/trainer/grpo_trainer.py")[0] == {"text"}


def test_reader_on_0_19_finds_forwarding_in_both_modes():
    (site,) = _vllm.sampling_params_sites(TRL_0_19_COLOCATE, "trl/trainer/grpo_trainer.py")
    assert site.forwards is True
    assert site.how == "after line 18: `generation_kwargs.update(self.args.generation_kwargs)`"
    assert site.where == "trl/trainer/grpo_trainer.py:19"
    (call,) = _vllm.client_call_sites(TRL_0_19_SERVER_CALL, "trl/trainer/grpo_trainer.py")
    assert call.forwards is True
    server = _vllm.server_forwarding(TRL_0_19_SERVER, "trl/scripts/vllm_serve.py")
    assert server.forwards is True and "request.generation_kwargs" in server.evidence[0]
    assert _vllm.prompt_paths(TRL_0_25_COLOCATE_CHAT, "trl/trainer/grpo_trainer.py")[0] == {"messages", "text"}


def test_reader_keeps_nested_helpers_inside_their_function():
    # trl 0.21's client defines a helper inside generate() before posting the request
    text = textwrap.dedent('''
        def generate(self, prompts, generation_kwargs=None):
            url = f"{self.base_url}/generate/"

            def pil_to_base64(image):
                return image

            response = self.session.post(url, json={"prompts": prompts, "generation_kwargs": generation_kwargs or {}})

        def init_communicator(self):
            pass
    ''')
    sent = _vllm.client_sends_kwargs(text, "trl/extras/vllm_client.py")
    assert sent.forwards is True


# -- vLLM's own loader (runs where vllm is installed: see the vLLM lane) --------------------------------

def _require_vllm() -> None:
    """vLLM's own loader is tested where vllm is installed; the vLLM CI lane sets TRL_DOCTOR_REQUIRE_VLLM=1 so
    that a broken vllm install fails there instead of skipping."""
    import os

    if os.environ.get("TRL_DOCTOR_REQUIRE_VLLM"):
        import vllm.tokenizers  # noqa: F401
    else:
        pytest.importorskip("vllm.tokenizers", exc_type=ImportError)


def test_vllm_loader_path(built_fixtures):
    _require_vllm()
    loaded = _vllm.load_as_vllm(built_fixtures / "models" / "qwen2-search", trust_remote_code=False)
    assert loaded.error is None and loaded.loader.startswith("vllm.tokenizers.get_tokenizer (vllm ")
    assert type(loaded.tokenizer).__module__.startswith("vllm.")
    assert "</search>" not in loaded.tokenizer.get_vocab()

    code, report = run_json("check", str(built_fixtures / "vllm-tokenizer-drift" / "bad_stop_string_added_tokens.yaml"), *SELECT)
    r = result_of(report, "TD002")  # run_json also proves vLLM's logging stayed off stdout
    assert r["status"] == "fail" and r["details"]["vLLM tokenizer loaded with"].startswith("vllm.tokenizers.get_tokenizer")


VLLM_STOP_PROBE = r'''
import sys, json
sys.modules["torchcodec"] = None  # SamplingParams pulls it in; it needs CUDA libraries
from vllm.sampling_params import SamplingParams
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.engine.detokenizer import IncrementalDetokenizer
from vllm.tokenizers import get_tokenizer

def stops(folder, **params):
    tok = get_tokenizer(folder, runner_type="generate", tokenizer_mode="auto", revision=None, trust_remote_code=False)
    req = EngineCoreRequest(request_id="r", prompt_token_ids=[5, 6], mm_features=None,
                            sampling_params=SamplingParams(max_tokens=50, **params), pooling_params=None,
                            arrival_time=0.0, lora_request=None, cache_salt=None, data_parallel_rank=None)
    d = IncrementalDetokenizer.from_new_request(tok, req)
    return any(d.update([i], False) is not None for i in [40, 41, 321, 42])

print(json.dumps([stops(sys.argv[1], stop=["</search>"]), stops(sys.argv[2], stop=["</search>"]),
                  stops(sys.argv[2], stop=["</search>"], skip_special_tokens=False, include_stop_str_in_output=True)]))
'''


def test_vllm_detokenizer_agrees_with_the_rule(fixture_copy):
    """vLLM's own detokenizer: the stop string never fires on the unsaved folder, nor on the saved one while
    special tokens are skipped; after --fix (tokenizer saved, skip_special_tokens false) it does."""
    _require_vllm()
    before = fixture_copy / "models" / "qwen2-search"
    pristine = fixture_copy / "models" / "qwen2-toolcall"  # same tokenizer files as qwen2-search before the fix
    config = fixture_copy / "vllm-tokenizer-drift" / "bad_stop_string_added_tokens.yaml"
    assert run_doctor("check", str(config), *SELECT, "--fix").returncode == 0
    probe = subprocess.run([sys.executable, "-c", VLLM_STOP_PROBE, str(pristine), str(before)], capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert json.loads(probe.stdout.strip().splitlines()[-1]) == [False, False, True]
