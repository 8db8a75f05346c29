"""A config that fine-tunes one component of an installed spaCy pipeline, with the training
settings of another config (the `spacy-configs` step: en_core_web_sm's ner beside spaCy's ner).

    python scripts/sourced_config.py configs/spacy_ner.cfg configs/spacy_sm_ner.cfg --component ner

The output is BASE with ``pipeline = [COMPONENT]``, ``[components.COMPONENT] source =
${vars.source_pipeline}`` and ``[vars] source_pipeline = "en_core_web_sm"``: the pipeline is named
when training (``scripts/train.py --pipeline``; an installed package name or a folder). The
component must not listen to another component of the source pipeline (en_core_web_sm's ``ner``
has its own tok2vec). New labels are added as the training data shows them; the source's other
labels stay in the model.
"""
import argparse
import sys
from pathlib import Path

from thinc.api import Config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="Config whose training settings to keep.")
    parser.add_argument("output", type=Path, help="Config to write.")
    parser.add_argument("--component", default="ner", help="The component of the pipeline to fine-tune.")
    args = parser.parse_args()
    if not args.base.exists():
        sys.exit(f"{args.base} not found (written by `spacy init config` in the spacy-configs step)")
    config = Config().from_disk(args.base, interpolate=False)
    config["nlp"]["pipeline"] = [args.component]
    config["components"] = {args.component: {"source": "${vars.source_pipeline}"}}
    config["vars"] = {"source_pipeline": "en_core_web_sm"}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    config.to_disk(args.output, interpolate=False)
    print(f"Wrote {args.output}: {args.component} of ${{vars.source_pipeline}} fine-tuned with the "
          f"training settings of {args.base}")


if __name__ == "__main__":
    main()
