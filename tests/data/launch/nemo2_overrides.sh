nemo llm pretrain --factory llama3_8b \
  trainer.strategy.tensor_model_parallel_size=2 trainer.num_nodes=2 trainer.devices=8 \
  data.global_batch_size=256 data.seq_length=8192 model.config.recompute_granularity=full model.config.recompute_method=uniform model.config.recompute_num_layers=1
