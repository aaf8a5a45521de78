"""Launch readers against shapes found in upstream launch scripts (bigscience tr11-176B-ml.slurm,
Megatron-LM examples). Each script is written by hand with the few lines that matter; the
expected values are what bash itself does with them."""

from planner.launch.shell import read_script


def test_backslash_at_end_of_a_comment_does_not_continue_it():
    # bash: a comment runs to the end of its line; a trailing backslash in it is literal, so the
    # next line is a command of its own (bigscience train/tr11-176B-ml/tr11-176B-ml.slurm has
    # '#    --universal-checkpoint \' right above 'export CMD=" ...').
    text = '#    --universal-checkpoint \\\nexport CMD="pretrain_gpt.py --num-layers 70"\necho $CMD\n'
    script = read_script(text, "x.slurm", {})
    assert script.variables.get("CMD") == "pretrain_gpt.py --num-layers 70"
    assert script.commands == [["echo", "pretrain_gpt.py", "--num-layers", "70"]]


def test_line_continuations_still_join_outside_comments():
    text = 'python pretrain_gpt.py \\\n    --num-layers 2 \\\n    --hidden-size 64\n'
    assert read_script(text, "x.sh", {}).commands == [
        ["python", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64"]]


def test_crlf_line_continuations_join_too():
    text = 'python pretrain_gpt.py --num-layers\\\r\n 2 --hidden-size 64\n'
    assert read_script(text, "x.sh", {}).commands == [
        ["python", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64"]]


def test_a_file_descriptor_before_a_redirection_is_not_a_word():
    # 'cmd ... 2>&1 | tee log' (bigscience tr11-176B-ml.slurm, most Megatron-DeepSpeed examples):
    # the 2 belongs to the redirection (bash(1) REDIRECTION: [n]>&word).
    text = 'python pretrain_gpt.py --num-layers 2 2>&1 | tee log\npython x.py --a 1 2> err.txt\n'
    assert read_script(text, "x.sh", {}).commands == [
        ["python", "pretrain_gpt.py", "--num-layers", "2"], ["tee", "log"], ["python", "x.py", "--a", "1"]]

