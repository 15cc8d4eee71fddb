{{ config(order_by='(scope, metric, window_name, rank)') }}

{#- The flash sale's two boards, ranked with the v1 tie policy: products by units sold and
    buyers by spend (a sum). Each entry carries its other figures in `extra`. -#}

with

-- only the rows that can make their board are ranked (macros/ranking_policy.sql
-- `rank_floor`): a thousand buyers or so instead of every buyer of the sale
products as (

    select
        product_id,
        units,
        orders,
        distinct_buyers,
        {{ rank_items('v1', partition_by='1', score='units', item='product_id') }} as rank
    from {{ ref('int_sale__products') }}
    where units >= (
        select {{ rank_floor('units', var('board_keep_top')) }} from {{ ref('int_sale__products') }}
    )

),

buyers as (

    select
        buyer_id,
        spend_cents,
        units,
        orders,
        {{ rank_items('v1', partition_by='1', score='spend_cents', item='buyer_id') }} as rank
    from {{ ref('int_sale__buyers') }}
    where spend_cents >= (
        select {{ rank_floor('spend_cents', var('board_keep_top')) }} from {{ ref('int_sale__buyers') }}
    )

),

final as (

    select
        'products' as scope,
        'units' as metric,
        toUInt32(rank) as rank,
        product_id as item_id,
        units as score,
        map(
            'orders', toFloat64(orders), 'distinct_buyers', toFloat64(distinct_buyers)
        ) :: Map(LowCardinality(String), Float64) as extra
    from products
    where rank <= {{ var('board_keep_top') }}

    union all

    select
        'buyers' as scope,
        'spend_cents' as metric,
        toUInt32(rank) as rank,
        buyer_id as item_id,
        spend_cents as score,
        map('orders', toFloat64(orders), 'units', toFloat64(units)) :: Map(LowCardinality(String), Float64) as extra
    from buyers
    where rank <= {{ var('board_keep_top') }}

)

select 'v1' as policy, scope, metric, 'all' as window_name, rank, item_id, score, extra from final
