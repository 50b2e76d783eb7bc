"""The built-in methods' run recipes (``keplm.training.run_recipe.RunRecipe``), one module per method, each named
by its method's ``register_method(..., run_recipe=...)`` call and imported only when a task script trains it."""
